package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// A caller's directory is the workspace: the harness starts in it and
// writes there, and destroying the sandbox leaves it and its files.
func TestWorkdirIsTheCallersDirectory(t *testing.T) {
	none, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationNone, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for name, newProvider := range map[string]func(t *testing.T) *local.Provider{
		"none":  func(*testing.T) *local.Provider { return none },
		"bwrap": func(t *testing.T) *local.Provider { return newBwrap(t, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			p := newProvider(t)
			dir := t.TempDir()
			plant(t, filepath.Join(dir, "mine.txt"), "kept")
			sb, err := p.Create(t.Context(), sandbox.Spec{Workdir: dir, StateKey: "p:s-" + name})
			if err != nil {
				t.Fatal(err)
			}
			if got := sb.Info().Workdir; got != dir {
				t.Errorf("Workdir = %s, want %s", got, dir)
			}
			out, err := sandboxtest.Sh(t, sb, "pwd; cat mine.txt; echo made > new.txt")
			if err != nil {
				t.Fatal(err)
			}
			if want := dir + "\nkept"; !strings.HasPrefix(out, want) {
				t.Errorf("pwd; cat = %q, want %q", out, want)
			}
			if err := sb.Destroy(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := p.RemoveState(t.Context(), "p:s-"+name); err != nil {
				t.Fatal(err)
			}
			for file, want := range map[string]string{"mine.txt": "kept", "new.txt": "made\n"} {
				b, err := os.ReadFile(filepath.Join(dir, file))
				if err != nil || string(b) != want {
					t.Errorf("%s after Destroy = %q, %v; want %q", file, b, err, want)
				}
			}
		})
	}
}

func TestWorkdirMustBeAnAbsoluteDirectory(t *testing.T) {
	p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationNone})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "f")
	plant(t, file, "x")
	for _, wd := range []string{"relative/dir", file, filepath.Join(t.TempDir(), "missing")} {
		if _, err := p.Create(t.Context(), sandbox.Spec{Workdir: wd}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "workdir") {
			t.Errorf("Create(Workdir %q) = %v, want ErrInvalid naming the workdir", wd, err)
		}
	}
}
