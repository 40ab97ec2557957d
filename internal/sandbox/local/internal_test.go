package local

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox"
)

// TestCgroupInForce checks from the host that a running sandbox process
// sits in the sandbox's cgroup with the configured limits.
func TestCgroupInForce(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs bubblewrap and root")
	}
	p, err := New(Config{Dir: t.TempDir(), MemoryMB: 100, Pids: 50, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(t.Context()) })
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	// Once cat echoes, it runs: the init and cat are both in the group.
	if _, err := proc.Stdin().Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(proc.Stdout(), make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	dirs := sb.(*Sandbox).cg.Dirs()
	want := map[string]string{"memory.max": "104857600", "pids.max": "50", "cpu.max": "50000 100000"}
	if _, v2 := dirs[""]; !v2 {
		want = map[string]string{"memory/memory.limit_in_bytes": "104857600", "pids/pids.max": "50", "cpu/cpu.cfs_quota_us": "50000"}
	}
	for file, value := range want {
		dir := dirs[""]
		if c, f, ok := strings.Cut(file, "/"); ok {
			dir, file = dirs[c], f
		}
		if got, _ := os.ReadFile(filepath.Join(dir, file)); strings.TrimSpace(string(got)) != value {
			t.Errorf("%s = %q, want %s", file, got, value)
		}
		if procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(strings.Fields(string(procs))) < 2 {
			t.Errorf("%s/cgroup.procs = %q, want bwrap's init and cat", dir, procs)
		}
	}
	proc.Stdin().Close()
	if err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
}
