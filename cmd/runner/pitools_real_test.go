package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/modeltest"
)

// TestRealPiBuiltinTools: a Pi request's `tools` list reaches the real
// Pi (as `pi --tools`): the model is offered only the listed built-in
// tools; without the list it is offered Pi's defaults. It runs where the
// real-harness tests run (RUNNER_TEST_HARNESS_DIR with pi_core).
func TestRealPiBuiltinTools(t *testing.T) {
	dir, names := realHarnesses(t)
	if !slices.Contains(names, "pi_core") {
		t.Skip("pi_core is not among RUNNER_TEST_HARNESSES")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	srv := modeltest.New(t, modeltest.WithScript(realScript))
	rs := startRealServe(t, ctx, dir, t.TempDir(), modelAllow(srv))
	c := realCases["pi_core"]
	offered := func(session string, tools any) []string {
		t.Helper()
		r := map[string]any{"harness": "pi_core", "sessionId": session, "model": c.model, "modelConnection": c.conn(srv),
			"permissions": map[string]any{"default": "allow"}, "messages": []any{map[string]any{"role": "user", "content": "say " + session}}}
		if tools != nil {
			r["tools"] = tools
		}
		rs.stream(t, ctx, r).wantOK(t, "PONG say "+session)
		var names []string
		for _, q := range srv.Requests() {
			if q.Aux != "" || !strings.Contains(q.Text, "say "+session) {
				continue
			}
			names = names[:0]
			for _, tool := range q.Tools {
				names = append(names, tool.Name)
			}
		}
		slices.Sort(names)
		t.Logf("%s: offered %v", session, names)
		return names
	}
	if got := offered("only-read", []string{"read"}); !slices.Equal(got, []string{"read"}) {
		t.Errorf("tools [read]: the model was offered %v, want [read]", got)
	}
	// The control: Pi's defaults are more than read.
	if got := offered("defaults", nil); len(got) < 2 || !slices.Contains(got, "read") || !slices.Contains(got, "bash") {
		t.Errorf("no tools list: the model was offered %v, want Pi's defaults (read, bash, …)", got)
	}
	if t.Failed() {
		t.Logf("runner stderr:\n%s", rs.stderr.String())
	}
}
