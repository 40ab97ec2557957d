package harness

import (
	"testing"
	"time"
)

// TestHarnessStatusCached: /health reads the harness directory at most
// once a second, and again once the second is over (or the clock went
// back).
func TestHarnessStatusCached(t *testing.T) {
	now := time.Unix(1000, 0)
	reads := 0
	c := &StatusCache{Status: func() map[string]any { reads++; return map[string]any{"n": reads} }, Now: func() time.Time { return now }}
	for _, step := range []struct {
		advance time.Duration
		reads   int
	}{{0, 1}, {500 * time.Millisecond, 1}, {499 * time.Millisecond, 1}, {time.Millisecond, 2}, {-time.Minute, 3}} {
		now = now.Add(step.advance)
		if got := c.Get()["n"]; got != step.reads || reads != step.reads {
			t.Fatalf("after %v: status %v with %d reads, want %d", step.advance, got, reads, step.reads)
		}
	}
}
