package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/modeltest"
)

// TestRealHarnessesResumeInAnotherWorkdir: the data dir moves between
// two runners, so the session's fresh sandbox has another working
// directory and the harness keys its transcript by it (Claude's
// projects/<key>, Pi's sessions/--<key>--). The cold turn still reloads
// natively: the model is sent only the newest message and sees the
// first turn from the harness's own transcript.
func TestRealHarnessesResumeInAnotherWorkdir(t *testing.T) {
	dir, names := realHarnesses(t)
	for _, name := range names {
		c, ok := realCases[name]
		if !ok || c.load != "load" || name == "codex" || name == "opencode" {
			continue // replayed anyway, or not keyed by the working directory
		}
		t.Run(name, func(t *testing.T) {
			h, _ := harness.Lookup(name)
			if _, err := os.Stat(filepath.Join(dir, h.Dir)); err != nil && os.Getenv("CI") == "" {
				t.Skipf("%s is not installed in %s", name, dir)
			}
			ctx, cancel := context.WithTimeout(t.Context(), realTurnBound)
			defer cancel()
			srv := modeltest.New(t, modeltest.WithScript(realScript))
			req := func(msgs ...any) map[string]any {
				return map[string]any{"harness": name, "sessionId": "s1", "model": c.model, "modelConnection": c.conn(srv),
					"permissions": map[string]any{"default": "allow"}, "messages": msgs}
			}
			user := func(text string) any { return map[string]any{"role": "user", "content": text} }
			assistant := func(text string) any { return map[string]any{"role": "assistant", "content": text} }

			parent := t.TempDir()
			data := filepath.Join(parent, "first")
			rs := startRealServe(t, ctx, dir, data, modelAllow(srv))
			tr := rs.stream(t, ctx, req(user("say hello")))
			tr.wantOK(t, "PONG say hello")
			rs.stop(t)

			moved := filepath.Join(parent, "moved-elsewhere")
			if err := os.Rename(data, moved); err != nil {
				t.Fatal(err)
			}
			rs = startRealServe(t, ctx, dir, moved, modelAllow(srv))
			before := len(srv.Calls())
			tr = rs.stream(t, ctx, req(user("say hello"), assistant("PONG say hello"), user("say again")))
			tr.wantOK(t, "PONG say again")
			if cold := tr.session(t); cold["mode"] != "load" {
				t.Errorf("cold turn in another working directory: agent-session %v, want mode load", cold)
			}
			if calls := srv.Calls()[before:]; len(calls) == 0 || !strings.Contains(string(calls[len(calls)-1].Raw), "say hello") {
				t.Errorf("cold turn: the model's request does not carry the first turn's text")
			}
			if t.Failed() {
				t.Logf("runner stderr:\n%s", rs.stderr.String())
			}
		})
	}
}
