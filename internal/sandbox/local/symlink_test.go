package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// The agent plants links where the runner writes next (AGENTS.md, a
// harnessFiles directory, a harness config under $HOME): WriteFile runs on
// the host as the runner, so following one writes a host file. A link at
// the path is replaced by the file; one among its parents refuses the
// write; the host file keeps its content either way.
func TestWriteFileNeverFollowsAPlantedLink(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]func(testing.TB) *local.Provider{
		"bwrap":  func(t testing.TB) *local.Provider { return newBwrap(t, nil) },
		"run-as": newRunAs,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			plant(t, victim, "HOST")
			sb := createSpec(t, p(t), sandbox.Spec{})
			info := sb.Info()
			if out, err := sandboxtest.Sh(t, sb, "ln -s "+victim+" AGENTS.md && ln -s "+dir+" sub && mkdir -p $HOME/.codex && ln -s "+victim+" $HOME/.codex/config.toml"); err != nil {
				t.Fatalf("plant links: %v: %s", err, out)
			}
			for _, path := range []string{info.Workdir + "/AGENTS.md", info.Home + "/.codex/config.toml"} {
				if err := sb.WriteFile(t.Context(), path, []byte("RUNNER"), 0o600); err != nil {
					t.Fatalf("write %s: %v", path, err)
				}
				if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("%s = %v, %v; want a regular file", path, fi, err)
				}
			}
			if err := sb.WriteFile(t.Context(), info.Workdir+"/sub/victim", []byte("RUNNER"), 0o600); !errors.Is(err, filetree.ErrLink) {
				t.Fatalf("write through a linked directory: %v, want ErrLink", err)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "HOST" {
				t.Fatalf("host file = %q, %v; want HOST", b, err)
			}
			if out, err := sandboxtest.Sh(t, sb, "cat AGENTS.md && echo more >> AGENTS.md"); err != nil || out != "RUNNER" {
				t.Fatalf("AGENTS.md in the sandbox: %q, %v", out, err)
			}
		})
	}
}
