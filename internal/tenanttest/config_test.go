package tenanttest

import (
	"strings"
	"testing"
)

// TestFaultZeroRunLimits: docs/configuration.md and runner.Limits say a run limit
// at 0 is off, but the loader clamped every *_MS to at least 1 ms, so an
// operator who turned the total limit off failed every turn at once. What
// must hold: with the three run limits at 0 a turn completes, and the
// runner does not warn about them.
func TestFaultZeroRunLimits(t *testing.T) {
	needBwrap(t)
	r := start(t,
		"AGENTA_RUNNER_RUN_TOTAL_TIMEOUT_MS=0",
		"AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS=0",
		"AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS=0",
	)
	tr := r.stream(t, fake("say limits off", map[string]any{"sessionId": "zero-limits"}))
	if !tr.Result.OK || !strings.Contains(tr.Text(), "limits off") {
		t.Fatalf("turn with the run limits off: status %d result %+v", tr.Status, tr.Result)
	}
	if log := r.Log(); strings.Contains(log, "TIMEOUT_MS") {
		t.Errorf("runner warned about a run limit set to 0:\n%s", log)
	}
}
