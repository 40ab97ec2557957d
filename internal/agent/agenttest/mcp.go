package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/jsonrpc"
)

// callMCP starts the named stdio MCP server from session/new, initializes
// it and calls one tool, as a harness would.
func (r *turn) callMCP(server, tool, args string) (string, error) {
	var spec *mcpServerSpec
	for i := range r.s.MCP {
		if r.s.MCP[i].Name == server {
			spec = &r.s.MCP[i]
		}
	}
	if spec == nil {
		return "", fmt.Errorf("%w: %s", errNoServer, server)
	}
	if spec.Command == "" {
		return "", fmt.Errorf("server %s is not stdio", server)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, spec.Command, spec.Args...)
	cmd.Env = os.Environ()
	for _, e := range spec.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	conn := jsonrpc.New(out, in, nil)
	defer func() {
		_ = in.Close()
		_ = cmd.Wait()
		conn.Close()
	}()
	var init json.RawMessage
	if err := conn.Call(ctx, "initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "fake-agent", "version": "1"},
	}, &init); err != nil {
		return "", fmt.Errorf("initialize: %w (stderr: %s)", err, stderr.String())
	}
	_ = conn.Notify("notifications/initialized", map[string]any{})
	if args == "" {
		args = "{}"
	}
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := conn.Call(ctx, "tools/call", map[string]any{"name": tool, "arguments": json.RawMessage(args)}, &res); err != nil {
		return "", fmt.Errorf("tools/call: %w (stderr: %s)", err, stderr.String())
	}
	var b strings.Builder
	if res.IsError {
		b.WriteString("[error] ")
	}
	for _, c := range res.Content {
		b.WriteString(c.Text)
	}
	return b.String(), nil
}
