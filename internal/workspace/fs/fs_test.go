package fs_test

import (
	"testing"

	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
	"github.com/agentrunner/runner/internal/workspace/workspacetest"
)

func TestConformance(t *testing.T) {
	workspacetest.Run(t, func(t *testing.T) workspace.Store {
		s, err := fs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestRelativeDirRefused(t *testing.T) {
	if _, err := fs.New("rel/dir"); err == nil {
		t.Fatal("a relative directory was accepted")
	}
}
