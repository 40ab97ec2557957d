package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mattn/go-isatty"

	"github.com/agentrunner/runner/internal/sandboxd"
	"github.com/agentrunner/runner/internal/tools/relay"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

const usage = `runner runs AI coding agents in sandboxes.

Usage:
  runner serve                 run the HTTP service (needs AGENTA_RUNNER_TOKEN)
  runner run [flags] [PROMPT]  run one turn, shown as it happens on a terminal (-ask, -session, -workdir, -url)
  runner health [flags]        query a running service's /health
  runner sessions [ID]         a running service's sessions, or one with its turns
  runner sessions tail ID      follow a session's events live
  runner jobs submit|list|show|cancel|run|tail   background and scheduled jobs (docs/jobs.md)
  runner harness install <name>…  install built-in harnesses (npm, pinned) into AGENTA_RUNNER_HARNESS_DIR
  runner harness list          show installed harnesses, versions and commands
  runner daytona snapshot build [flags]  build the Daytona snapshot the daytona provider uses
  runner mcp-stdio             (inside a sandbox) the harness's stdio MCP server for runner tools
  runner sandboxd              (inside a remote sandbox) the daemon the runner drives it through
  runner version               print the version

Configuration is read from the environment; see docs/configuration.md.
`

func run(ctx context.Context, args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if wantsHelp(args[1:]) && printFlaglessHelp(args[0], stdout) {
		return 0
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], environ, stdout, stderr)
	case "run":
		return runTurn(ctx, args[1:], environ, stdin, stdout, stderr)
	case "health":
		return health(ctx, args[1:], environ, stdout, stderr)
	case "sessions":
		return sessions(ctx, args[1:], environ, stdout, stderr)
	case "jobs":
		return jobsCmd(ctx, args[1:], environ, stdin, stdout, stderr)
	case "harness":
		return harnessCmd(ctx, args[1:], environ, stdout, stderr)
	case "daytona":
		return daytonaCmd(ctx, args[1:], environ, stdout, stderr)
	case "mcp-stdio":
		// Started by a harness inside a sandbox: relays MCP to the runner,
		// over the relay socket (local) or the in-sandbox daemon (remote).
		return mcpStdio(ctx, args[1:], envLookup(environ), stdin, stdout, stderr)
	case "channel-forward":
		// Inside a remote sandbox: the harness's loopback door to the
		// runner's key gateway.
		return sandboxd.ForwardMain(ctx, args[1:], envLookup(environ), stdout, stderr)
	case "sandboxd":
		// The in-sandbox daemon of remote providers.
		return sandboxd.Main(ctx, args[1:], envLookup(environ), stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "runner", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	// The commands a local sandbox runs this binary for (local_linux.go).
	if code, ok := localCommand(args); ok {
		return code
	}
	fmt.Fprintf(stderr, "runner: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func mcpStdio(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	sock := getenv(sandboxd.SocketEnv)
	if getenv(relay.EnvSocket) != "" || sock == "" {
		return relay.MCPStdio(ctx, args, getenv, stdin, stdout, stderr)
	}
	token := getenv(relay.EnvToken)
	if token == "" {
		fmt.Fprintf(stderr, "runner mcp-stdio: %s must be set\n", relay.EnvToken)
		return 1
	}
	conn, err := sandboxd.Dial(ctx, sock, "tools")
	if err != nil {
		fmt.Fprintf(stderr, "runner mcp-stdio: connect to the runner through sandboxd: %v\n", err)
		return 1
	}
	if err := relay.Client(ctx, conn, token, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "runner mcp-stdio: %v\n", err)
		return 1
	}
	return 0
}

func envLookup(environ []string) func(string) string {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	// Not a mode check: /dev/null is a character device too.
	return isatty.IsTerminal(f.Fd())
}
