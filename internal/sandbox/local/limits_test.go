package local_test

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// Limit tests: each fills a cgroup limit inside a sandbox, asserts the
// reason Wait reports, and checks that the next sandbox still works.

func TestLimitPids(t *testing.T) {
	t.Parallel()
	needLimits(t)
	p := newBwrap(t, func(c *local.Config) { c.Pids = 32 })
	sb := createSpec(t, p, sandbox.Spec{})
	_, err := sandboxtest.Sh(t, sb, `i=0; while [ $i -lt 200 ]; do sleep 100 & i=$((i+1)); done; wait`)
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || ee.Reason != "too many processes" {
		t.Errorf("fork bomb: Wait = %v, want an ExitError with reason too many processes", err)
	}
	// Controls: the same sandbox and a new one still run processes.
	if out, err := sandboxtest.Sh(t, sb, "echo fine"); err != nil || out != "fine\n" {
		t.Errorf("after the fork bomb: %q, %v", out, err)
	}
	if out, err := sandboxtest.Sh(t, createSpec(t, p, sandbox.Spec{}), "echo fine"); err != nil || out != "fine\n" {
		t.Errorf("next sandbox: %q, %v", out, err)
	}
}

func TestLimitMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes into their cgroup limits: skipped under -short")
	}
	t.Parallel()
	needLimits(t)
	p := newBwrap(t, func(c *local.Config) { c.MemoryMB = 64 })
	sb := createSpec(t, p, sandbox.Spec{})
	if out, err := run(t, sb, nil, "hog", "8"); err != nil || out != "allocated 8\n" {
		t.Errorf("8 MiB under a 64 MiB limit (control): %q, %v", out, err)
	}
	_, err := run(t, sb, nil, "hog", "256")
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || ee.Reason != "out of memory" {
		t.Errorf("memory hog: Wait = %v, want an ExitError with reason out of memory", err)
	}
	if out, err := sandboxtest.Sh(t, createSpec(t, p, sandbox.Spec{}), "echo fine"); err != nil || out != "fine\n" {
		t.Errorf("next sandbox: %q, %v", out, err)
	}
}

func TestLimitRealForkBomb(t *testing.T) {
	t.Parallel()
	needLimits(t)
	p := newBwrap(t, func(c *local.Config) { c.Pids = 64 })
	sb := createSpec(t, p, sandbox.Spec{})
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "(bomb() { bomb | bomb & }; bomb) & echo launched; exec sleep 1000"}, Env: sandboxtest.Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("launched\n"))
	if _, err := io.ReadFull(proc.Stdout(), line); err != nil {
		t.Fatalf("%v: %v: %s", err, proc.Wait(), proc.StderrTail())
	}
	// It never ends by itself; the turn's deadline would kill it.
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(); err == nil {
		t.Error("Wait after Kill = nil")
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("Destroy after a fork bomb: %v", err)
	}
	if out, err := sandboxtest.Sh(t, createSpec(t, p, sandbox.Spec{}), "echo fine"); err != nil || out != "fine\n" {
		t.Errorf("next sandbox (control): %q, %v", out, err)
	}
}

func TestRunAsLimits(t *testing.T) {
	t.Parallel()
	needLimits(t)
	if os.Geteuid() != 0 {
		t.Skip("a sandbox uid needs root")
	}
	p := newBwrap(t, func(c *local.Config) { c.SandboxUID, c.Pids = 65534, 32 })
	sb := createSpec(t, p, sandbox.Spec{})
	_, err := sandboxtest.Sh(t, sb, `i=0; while [ $i -lt 200 ]; do sleep 100 & i=$((i+1)); done; wait`)
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || ee.Reason != "too many processes" {
		t.Errorf("fork bomb as the sandbox user: Wait = %v, want reason too many processes", err)
	}
}

func TestNewRemovesStaleSandboxes(t *testing.T) {
	t.Parallel()
	needLimits(t)
	// A runner that crashed can leave sandboxes running; the next New on
	// the same data dir ends them.
	dir := t.TempDir()
	mk := func() *local.Provider {
		return newBwrap(t, func(c *local.Config) { c.Dir, c.DataDir = dir+"/sandboxes", dir })
	}
	sb := createSpec(t, mk(), sandbox.Spec{})
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 1000"}, Env: sandboxtest.Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(proc.Stdout(), make([]byte, len("started\n"))); err != nil {
		t.Fatal(err)
	}
	mk()
	if err := proc.Wait(); err == nil {
		t.Error("the old sandbox's process survived New")
	}
	// Control: a runner on another data dir leaves it alone.
	other := createSpec(t, newBwrap(t, nil), sandbox.Spec{})
	proc, err = other.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "echo started; read x; echo alive"}, Env: sandboxtest.Env(other)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(proc.Stdout(), make([]byte, len("started\n"))); err != nil {
		t.Fatal(err)
	}
	mk()
	proc.Stdin().Close()
	if out, _ := io.ReadAll(proc.Stdout()); string(out) != "alive\n" {
		t.Errorf("another runner's sandbox: %q, want it alive", out)
	}
	if err := proc.Wait(); err != nil {
		t.Error(err)
	}
}
