package harness_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/harness"
)

// The launch table is the catalogue's bins and arguments; an override
// replaces a built-in's command or adds a harness, and the caller's slice
// is not shared.
func TestCommands(t *testing.T) {
	mine := []string{"/opt/agent", "--acp"}
	got := harness.Commands(map[string][]string{"claude": {"/usr/local/bin/claude-acp"}, "mine": mine})
	mine[0] = "changed"
	want := map[string][]string{
		"claude":    {"/usr/local/bin/claude-acp"},
		"codex":     {"codex-acp"},
		"pi_core":   {"pi-acp"},
		"pi_agenta": {"pi-acp"},
		"gemini":    {"gemini", "--acp"},
		"opencode":  {"opencode", "acp"},
		"mine":      {"/opt/agent", "--acp"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
	for _, name := range harness.Names() {
		if _, ok := harness.Commands(nil)[name]; !ok {
			t.Errorf("built-in %s has no launch command", name)
		}
	}
}
