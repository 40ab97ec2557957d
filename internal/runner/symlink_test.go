package runner_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/runner"
)

// TestTranscriptCheckpointNeverFollowsALinkedParent: the transcript mount
// syncs a harness directory below $HOME (Claude's .claude/projects); the
// agent replaces its parent with a link to a host directory. The
// checkpoint must not read through it: the turn ends well, and nothing
// of the host directory reaches the store.
func TestTranscriptCheckpointNeverFollowsALinkedParent(t *testing.T) {
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "projects"), 0o755); err != nil {
		t.Fatal(err)
	}
	const secret = "host secret 51c2e0 beside the sandbox"
	if err := os.WriteFile(filepath.Join(outside, "projects", "secret"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	storeDir := t.TempDir()
	e := durableEnv(t, sharedStore(t), storeDir, func(c *runner.Config) {
		c.Harnesses["fake"] = agent.Spec{Command: agenttest.Command(), StateDirs: []string{".claude/projects"}}
	})
	res := e.turn(t, req{session: "s", messages: []string{"exec ln -s " + outside + " $HOME/.claude && echo planted"}})
	if !res.res.OK || !strings.Contains(res.res.Output, "planted") {
		t.Fatalf("turn: ok=%v %q %q", res.res.OK, res.res.Output, res.res.Error)
	}
	err := filepath.WalkDir(storeDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if b, rerr := os.ReadFile(p); rerr == nil && (bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte("projects/secret"))) {
			t.Errorf("the store's %s names or holds the host directory's file", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
