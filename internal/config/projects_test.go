package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/config"
	"github.com/google/go-cmp/cmp"
)

const mainToken = "main-token-0123456789abcdef"

func TestProjectTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# per-project tokens\nprojA=token-a-0123456789abcdef\nprojB = token-b-0123456789abcdef, projC=token-c-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"projA": "token-a-0123456789abcdef", "projB": "token-b-0123456789abcdef", "projC": "token-c-0123456789abcdef"}
	for name, value := range map[string]string{
		"list": "projA=token-a-0123456789abcdef,projB=token-b-0123456789abcdef,projC=token-c-0123456789abcdef",
		"file": "@" + file,
	} {
		c, _, err := config.Load([]string{"AGENTA_RUNNER_TOKEN=" + mainToken, "AGENTA_RUNNER_PROJECT_TOKENS=" + value})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := cmp.Diff(want, c.HTTP.ProjectTokens); d != "" {
			t.Errorf("%s: (-want +got)\n%s", name, d)
		}
	}
	c, _, err := config.Load([]string{"AGENTA_RUNNER_TOKEN=" + mainToken})
	if err != nil || c.HTTP.ProjectTokens != nil {
		t.Fatalf("unset: %v %v", c.HTTP.ProjectTokens, err)
	}
}

// A bad list fails the boot, naming what to change and never a token.
func TestProjectTokensRefused(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"projA", "entry 1 is not project=token"},
		{"=token-a-0123456789abcdef", "entry 1 is not project=token"},
		{"projA=short", `project "projA" is under 16 characters`},
		{"projA=token-a-0123456789abcdef,projA=token-b-0123456789abcdef", `project "projA" is listed twice`},
		{"projA=" + mainToken, `project "projA" is AGENTA_RUNNER_TOKEN`},
		{"projA=token-a-0123456789abcdef,projB=token-a-0123456789abcdef", `share a token`},
		{"@/nonexistent/tokens", "read the token file"},
	} {
		_, _, err := config.Load([]string{"AGENTA_RUNNER_TOKEN=" + mainToken, "AGENTA_RUNNER_PROJECT_TOKENS=" + tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.value, err, tc.want)
			continue
		}
		for _, secret := range []string{"token-a-0123456789abcdef", "token-b-0123456789abcdef", mainToken, "short"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: the error quotes a token: %v", tc.value, err)
			}
		}
	}
}
