package harness

import (
	"encoding/json"
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

func TestPiSessionHeader(t *testing.T) {
	line := []byte(`{"type":"session","version":3,"id":"x","timestamp":"t","cwd":"/old/work"}` + "\n")
	got := PiSessionHeader(line, "/old/work", "/new/work")
	var h struct {
		Type, ID, Cwd string
		Version       int
	}
	if err := json.Unmarshal(got, &h); err != nil || h.Cwd != "/new/work" || h.ID != "x" || h.Version != 3 || !strings.HasSuffix(string(got), "}\n") {
		t.Errorf("header %s: %+v %v", got, h, err)
	}
	for _, keep := range []string{`{"type":"message","cwd":"/old/work"}` + "\n", `{"type":"session","cwd":"/other"}`, "not json\n"} {
		if got := PiSessionHeader([]byte(keep), "/old/work", "/new/work"); string(got) != keep {
			t.Errorf("PiSessionHeader(%q) = %q, want it unchanged", keep, got)
		}
	}
}
