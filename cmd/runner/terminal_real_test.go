package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/modeltest"
)

// TestRealHarnessesInATerminal drives `runner run -ask` in a pseudo-terminal
// with each installed real harness that asks permission, against the fake
// model: the harness's shell call is put to the person, typed approval
// lets it run, and the turn ends with the model's closing text. Gated like
// the other real-harness tests (RUNNER_TEST_HARNESS_DIR).
func TestRealHarnessesInATerminal(t *testing.T) {
	dir, names := realHarnesses(t)
	for _, name := range names {
		c, ok := realCases[name]
		if !ok {
			t.Fatalf("no test case for harness %q", name)
		}
		if !c.asks {
			continue // Pi never asks: -ask is refused for it
		}
		t.Run(name, func(t *testing.T) {
			srv := modeltest.New(t, modeltest.WithScript(realScript))
			req := map[string]any{"harness": name, "model": c.model, "modelConnection": c.conn(srv)}
			if c.harnessMod != "" {
				req["harnessMode"] = c.harnessMod
			}
			b, _ := json.Marshal(req)
			file := filepath.Join(t.TempDir(), "req.json")
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
			env := []string{
				"PATH=" + os.Getenv("PATH"),
				"HOME=" + t.TempDir(),
				"AGENTA_RUNNER_DATA_DIR=" + t.TempDir(),
				"AGENTA_RUNNER_HARNESS_DIR=" + dir,
				"AGENTA_RUNNER_LOCAL_ISOLATION=none",
				modelAllow(srv),
				"NO_COLOR=1",
			}
			tm := startTerm(t, env, "run", "-request", file, "-ask", "use the tool now")
			tm.waitFor(`approval needed: (.|\n)*deny \[d\]\? $`)
			tm.typ("a\n")
			if code := tm.exit(); code != 0 {
				t.Fatalf("exit code %d; terminal:\n%s", code, tm.output())
			}
			out := tm.output()
			t.Logf("terminal:\n%s", out)
			for _, want := range []string{"⏺ ", "allowed by user", "DONE tool ran", "─ end_turn"} {
				if !strings.Contains(out, want) {
					t.Errorf("terminal lacks %q", want)
				}
			}
		})
	}
}
