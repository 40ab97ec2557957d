package main

import (
	"context"
	"fmt"

	"github.com/agentrunner/runner/internal/sandboxd"
	"github.com/agentrunner/runner/internal/tools/relay"
)

// mcpStdioCommand is `runner mcp-stdio`, started by a harness inside a
// sandbox: the harness's stdio MCP server for runner tools, relayed to
// the runner over the relay socket (local) or the in-sandbox daemon
// (remote).
type mcpStdioCommand struct{ stdio }

func (c mcpStdioCommand) run(ctx context.Context, args []string) int {
	getenv := envLookup(c.environ)
	sock := getenv(sandboxd.SocketEnv)
	if getenv(relay.EnvSocket) != "" || sock == "" {
		return relay.MCPStdio(ctx, args, getenv, c.stdin, c.stdout, c.stderr)
	}
	token := getenv(relay.EnvToken)
	if token == "" {
		fmt.Fprintf(c.stderr, "runner mcp-stdio: %s must be set\n", relay.EnvToken)
		return 1
	}
	conn, err := sandboxd.Dial(ctx, sock, "tools")
	if err != nil {
		fmt.Fprintf(c.stderr, "runner mcp-stdio: connect to the runner through sandboxd: %v\n", err)
		return 1
	}
	if err := relay.Client(ctx, conn, token, c.stdin, c.stdout); err != nil {
		fmt.Fprintf(c.stderr, "runner mcp-stdio: %v\n", err)
		return 1
	}
	return 0
}
