package tools_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/wire"
)

func TestDirectCalls(t *testing.T) {
	t.Parallel()
	runCtx := json.RawMessage(`{"project":{"id":"p1"},"session":{"id":"from-platform"},"run":{"kind":"test"}}`)
	tests := []struct {
		name     string
		call     string // the spec's call descriptor
		bindings string // the spec's contextBindings
		callRef  string
		args     map[string]any
		method   string
		path     string
		body     string // JSON; "" for none
		errText  string // model-facing error, when the call fails
	}{
		{
			name:   "post with path param, fixed body and context, fixed fields win",
			call:   `{"method":"POST","path":"/api/schedules/{id}/stop","body":{"k":"fixed","nested":{"a":1}},"context":{"project_id":"$ctx.project.id"}}`,
			args:   map[string]any{"id": "a/b", "k": "model", "nested": map[string]any{"b": 2}, "project_id": "forged", "description": "eph"},
			method: "POST", path: "/api/schedules/a%2Fb/stop",
			body: `{"k":"fixed","nested":{"a":1,"b":2},"project_id":"p1"}`,
		},
		{
			name:   "args_into and the runner's session id",
			call:   `{"method":"PUT","path":"/api/invoke","args_into":"data.inputs","context":{"session.id":"$ctx.session.id"}}`,
			args:   map[string]any{"q": "x"},
			method: "PUT", path: "/api/invoke",
			body: `{"data":{"inputs":{"q":"x"}},"session":{"id":"s-runner"}}`,
		},
		{
			name:   "get sends no body",
			call:   `{"method":"GET","path":"/api/items/{item.id}"}`,
			args:   map[string]any{"item": map[string]any{"id": 7}},
			method: "GET", path: "/api/items/7",
		},
		{
			name:    "missing path parameter",
			call:    `{"method":"DELETE","path":"/api/items/{id}"}`,
			errText: "path parameter {id} is missing",
		},
		{
			name:    "traversal through a parameter",
			call:    `{"method":"GET","path":"/api/items/{id}"}`,
			args:    map[string]any{"id": ".."},
			errText: "not a safe path",
		},
		{
			name:    "outside the API mount",
			call:    `{"method":"GET","path":"/admin"}`,
			errText: `outside the API mount "/api"`,
		},
		{
			name:    "unresolvable binding names itself",
			call:    `{"method":"POST","path":"/api/x","context":{"trace":"$ctx.trace.id"}}`,
			errText: `binding "trace"`,
		},
		{
			name:     "callRef with contextBindings",
			callRef:  "tools.agenta.test_run",
			bindings: `{"target.project":"$ctx.project.id"}`,
			args:     map[string]any{"target": map[string]any{"project": "forged", "x": 1}},
			method:   "POST", path: "/api/tools/call",
			body: `{"data":{"id":"c1","type":"function","function":{"name":"tools.agenta.test_run","arguments":{"target":{"project":"p1","x":1}}}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cb := newCallback(t, func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(`{"call":{"data":{"content":"done"}}}`))
			})
			spec := wire.ToolSpec{Name: "t", CallRef: tt.callRef, EphemeralArgs: []string{"description"}}
			if tt.call != "" {
				spec.Call = json.RawMessage(tt.call)
			}
			if tt.bindings != "" {
				spec.ContextBindings = json.RawMessage(tt.bindings)
			}
			set, err := tools.New(tools.Config{HostAllowlist: []string{cb.host()}, RunContext: runCtx, SessionID: "s-runner"},
				[]wire.ToolSpec{spec}, &wire.ToolCallback{Endpoint: cb.URL + "/api/tools/call", Authorization: "Bearer k"}, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			res, err := connect(t, set).CallTool(t.Context(), &mcp.CallToolParams{Meta: mcp.Meta{"toolCallId": "c1"}, Name: "t", Arguments: tt.args})
			if err != nil {
				t.Fatal(err)
			}
			got := cb.received()
			if tt.errText != "" {
				if !res.IsError || !strings.Contains(text(t, res), tt.errText) || len(got) != 0 {
					t.Errorf("result %v %q with %d requests, want an error containing %q and no request", res.IsError, text(t, res), len(got), tt.errText)
				}
				return
			}
			if res.IsError || len(got) != 1 {
				t.Fatalf("result %v %q with %d requests", res.IsError, text(t, res), len(got))
			}
			if got[0].Method != tt.method || got[0].Path != tt.path || got[0].Auth != "Bearer k" || got[0].RunKind != "test" {
				t.Errorf("request %s %s auth %q, want %s %s", got[0].Method, got[0].Path, got[0].Auth, tt.method, tt.path)
			}
			if tt.body == "" {
				if len(got[0].Body) != 0 {
					t.Errorf("body = %s, want none", got[0].Body)
				}
				return
			}
			var gotBody, wantBody any
			json.Unmarshal(got[0].Body, &gotBody)
			json.Unmarshal([]byte(tt.body), &wantBody)
			if diff := cmp.Diff(wantBody, gotBody); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDirectCallResultVerbatim: a direct call's body is the result, JSON
// envelope or not.
func TestDirectCallResultVerbatim(t *testing.T) {
	t.Parallel()
	cb := newCallback(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("plain text")) })
	set, err := tools.New(tools.Config{HostAllowlist: []string{cb.host()}},
		[]wire.ToolSpec{{Name: "t", Call: json.RawMessage(`{"method":"GET","path":"/x"}`)}}, &wire.ToolCallback{Endpoint: cb.URL + "/tools/call"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := connect(t, set).CallTool(t.Context(), &mcp.CallToolParams{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || text(t, res) != "plain text" {
		t.Errorf("result = %v %q", res.IsError, text(t, res))
	}
}
