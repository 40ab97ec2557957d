package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/modeltest"
)

// lookupScript answers "lookup" by calling the request's lookup tool (an
// MCP tool, whatever prefix the harness gives it) and, once its result
// came back, with "DONE <result>"; anything else as realScript.
func lookupScript(r modeltest.Request) modeltest.Reply {
	if !strings.Contains(r.Text, "lookup") {
		return realScript(r)
	}
	if len(r.ToolResults) > 0 {
		return modeltest.Reply{Text: "DONE " + r.ToolResults[0]}
	}
	for _, t := range r.Tools {
		if strings.HasSuffix(t.Name, "lookup") {
			return modeltest.Reply{ToolCalls: []modeltest.ToolCall{{Name: t.Name, Args: json.RawMessage(`{"q":"x"}`)}}}
		}
	}
	for _, t := range r.Tools {
		if t.Name == "ToolSearch" {
			// Claude Code defers MCP tools behind its tool search; a call
			// by the MCP tool's full name runs it all the same.
			return modeltest.Reply{ToolCalls: []modeltest.ToolCall{{Name: "mcp__agenta-tools__lookup", Args: json.RawMessage(`{"q":"x"}`)}}}
		}
	}
	var names []string
	for _, t := range r.Tools {
		names = append(names, t.Name)
	}
	return modeltest.Reply{Text: "no lookup tool offered among " + strings.Join(names, ",")}
}

// waitSlot waits until the runner's first pre-warm shape has a ready
// slot, failing with the start error the runner reports.
func waitSlot(t *testing.T, ctx context.Context, rs *runningServe) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rs.base+"/health", nil)
		var h struct {
			Prewarm []prewarmHealthEntry `json:"prewarm"`
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		if len(h.Prewarm) > 0 && h.Prewarm[0].Ready > 0 {
			return
		}
		if len(h.Prewarm) > 0 && h.Prewarm[0].LastError != "" {
			t.Fatalf("the slot failed to start: %s\n%s", h.Prewarm[0].LastError, rs.stderr.String())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no ready slot: %v; /health prewarm %+v\n%s", ctx.Err(), h.Prewarm, rs.stderr.String())
		case <-tick.C:
		}
	}
}

// TestRealHarnessPrewarmed: a new session of a real harness claims a
// pre-warmed slot started before the request existed. Must hold: the
// turn says it was prewarmed; every model call of the turn names the
// request's model (bound over ACP after the slot's session opened);
// Claude's tool call reaches the request's MCP tool (bound on the relay
// at claim), Pi's its own shell tool (Pi takes no MCP servers).
func TestRealHarnessPrewarmed(t *testing.T) {
	dir, names := realHarnesses(t)
	for _, name := range names {
		if name != "claude" && name != "pi_core" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			c := realCases[name]
			ctx, cancel := context.WithTimeout(t.Context(), realTurnBound)
			defer cancel()
			srv := modeltest.New(t, modeltest.WithScript(lookupScript))
			var calls atomic.Int32
			cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				_ = json.NewEncoder(w).Encode(map[string]any{"result": "looked-up-for-the-tenant"})
			}))
			defer cb.Close()
			rs := startRealServe(t, ctx, dir, t.TempDir(), modelAllow(srv), "AGENTA_RUNNER_PREWARM="+name+":1")
			waitSlot(t, ctx, rs)
			if n := len(srv.Calls()); n != 0 {
				t.Fatalf("the unclaimed slot called the model %d times", n)
			}
			req := map[string]any{"harness": name, "sessionId": "pw-real", "model": c.model, "modelConnection": c.conn(srv),
				"permissions": map[string]any{"default": "allow"}}
			prompt, want := "use the tool now", "DONE tool ran"
			if name == "claude" {
				prompt, want = "use lookup now", "looked-up-for-the-tenant"
				req["customTools"] = []map[string]any{{"name": "lookup", "description": "look a thing up", "readOnly": true,
					"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}}
				req["toolCallback"] = map[string]any{"endpoint": cb.URL + "/tools/call", "authorization": "tenant-bearer"}
			}
			req["messages"] = []any{map[string]any{"role": "user", "content": prompt}}
			tr := rs.stream(t, ctx, req)
			sess := tr.session(t)
			if sess["start"] != "prewarmed" {
				t.Errorf("agent-session %v, want start prewarmed\n%s", sess, rs.stderr.String())
			}
			tr.wantOK(t, want)
			if name == "claude" && calls.Load() == 0 {
				t.Errorf("the request's MCP tool was never called")
			}
			for _, call := range srv.Calls() {
				if call.Model != c.model {
					t.Errorf("a model call named %q, want the request's %q", call.Model, c.model)
				}
			}
		})
	}
}
