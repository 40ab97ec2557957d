package tools_test

import (
	"context"
	"testing"

	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestClientToolsAnsweredByConfig: a kind "client" tool needs no
// callback; its calls are answered by Config.Client.
func TestClientToolsAnsweredByConfig(t *testing.T) {
	t.Parallel()
	var got tools.Call
	set, err := tools.New(tools.Config{Client: func(_ context.Context, c tools.Call) (string, error) {
		got = c
		return `{"connected":true}`, nil
	}}, []wire.ToolSpec{{Name: "request_connection", Kind: "client"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := connect(t, set).CallTool(t.Context(), &mcp.CallToolParams{Name: "request_connection", Arguments: map[string]any{"provider": "github"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := text(t, res); out != `{"connected":true}` || res.IsError || got.Tool != "request_connection" || string(got.Args) != `{"provider":"github"}` {
		t.Errorf("result %q (error %v), call %+v", out, res.IsError, got)
	}
}
