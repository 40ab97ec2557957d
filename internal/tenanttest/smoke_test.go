package tenanttest

import (
	"strings"
	"testing"
)

// TestSuiteReachesTheRunner: the suite's runner serves a turn of the fake
// harness in a bwrap sandbox, so an attack that "holds" holds against a
// working runner, not a broken one.
func TestSuiteReachesTheRunner(t *testing.T) {
	needBwrap(t)
	r := start(t)
	tr := r.stream(t, fake("say hello there", map[string]any{"sessionId": "smoke"}))
	if !tr.Result.OK || !strings.Contains(tr.Text(), "hello there") {
		t.Fatalf("status %d result %+v\n%s", tr.Status, tr.Result, r.Log())
	}
}
