package agent

import (
	"strings"
	"testing"
)

// The expected keys were computed by the harnesses' own functions under
// Node (claude-agent-sdk-linux-x64 0.101's cli, pi-coding-agent 0.73.1's
// getDefaultSessionDir).
func TestTranscriptKeys(t *testing.T) {
	for _, tc := range []struct{ cwd, claude, pi string }{
		{"/home/user/work", "-home-user-work", "--home-user-work--"},
		{"/tmp/Test_x/001/sandboxes/state/ab12/work", "-tmp-Test-x-001-sandboxes-state-ab12-work", "--tmp-Test_x-001-sandboxes-state-ab12-work--"},
		{"/home/user-agent/ünï 😀.d", "-home-user-agent--n-----d", "--home-user-agent-ünï 😀.d--"},
		{"/" + strings.Repeat("a/b.c_", 40), strings.Repeat("-a-b-c", 33) + "-a-2ys3fl", "--" + strings.Repeat("a-b.c_", 40) + "--"},
		{"/" + strings.Repeat("x", 250), "-" + strings.Repeat("x", 199) + "-v734pd", "--" + strings.Repeat("x", 250) + "--"},
		{`C:\Users\me`, "C--Users-me", "--C--Users-me--"},
	} {
		if got := ClaudeProjectKey(tc.cwd); got != tc.claude {
			t.Errorf("ClaudeProjectKey(%q) = %q, want %q", tc.cwd, got, tc.claude)
		}
		if got := PiSessionKey(tc.cwd); got != tc.pi {
			t.Errorf("PiSessionKey(%q) = %q, want %q", tc.cwd, got, tc.pi)
		}
	}
}
