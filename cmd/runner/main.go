// Command runner runs AI coding agents in sandboxes: `runner serve` is the
// HTTP service, `runner run` one turn from the command line. See README.md
// and docs/.
//
// main only dispatches: each subcommand is a type of its own, in a file
// named after it (serve.go, runcmd.go, health.go, sessions.go,
// jobs_cli.go, harness.go, daytona.go, mcpstdio.go, version.go); the
// in-sandbox entry points (channel-forward, sandboxd, and the local
// sandbox's in local_linux.go) are their packages'.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentrunner/runner/internal/sandboxd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

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

// stdio is what a command runs with: the process's environment and
// standard streams.
type stdio struct {
	environ []string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

// command is one subcommand; run returns the process's exit code.
type command interface {
	run(ctx context.Context, args []string) int
}

func run(ctx context.Context, args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if wantsHelp(args[1:]) && printFlaglessHelp(args[0], stdout) {
		return 0
	}
	s := stdio{environ: environ, stdin: stdin, stdout: stdout, stderr: stderr}
	var cmd command
	switch args[0] {
	case "serve":
		cmd = serveCommand{s}
	case "run":
		cmd = runCommand{s}
	case "health":
		cmd = healthCommand{s}
	case "sessions":
		cmd = sessionsCommand{s}
	case "jobs":
		cmd = jobsCommand{s}
	case "harness":
		cmd = harnessCommand{s}
	case "daytona":
		cmd = daytonaCommand{s}
	case "mcp-stdio":
		cmd = mcpStdioCommand{s}
	case "version", "--version", "-v":
		cmd = versionCommand{s}
	case "channel-forward":
		// Inside a remote sandbox: the harness's loopback door to the
		// runner's key gateway.
		return sandboxd.ForwardMain(ctx, args[1:], envLookup(environ), stdout, stderr)
	case "sandboxd":
		// The in-sandbox daemon of remote providers.
		return sandboxd.Main(ctx, args[1:], envLookup(environ), stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		// The commands a local sandbox runs this binary for (local_linux.go).
		if code, ok := localCommand(args); ok {
			return code
		}
		fmt.Fprintf(stderr, "runner: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return cmd.run(ctx, args[1:])
}
