package netstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// The reaper kills a recorded slirp4netns that still runs, and nothing
// that merely has its pid now.
func TestReapSlirps(t *testing.T) {
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "slirp4netns") // the name is what the reaper checks
	if err := os.WriteFile(fake, data, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(name, "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	leftover := start(fake)
	other := start(sleep)
	if recordSlirp(dir, leftover.Process.Pid) == "" {
		t.Fatal("no record written")
	}
	if recordSlirp(dir, other.Process.Pid) != "" {
		t.Error("recorded a process that is not slirp4netns")
	}
	// A stale record: the pid was reused by another process.
	if err := os.WriteFile(filepath.Join(dir, "slirp4netns."+strconv.Itoa(other.Process.Pid)), []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	ReapSlirps(dir)
	if err := leftover.Wait(); err == nil {
		t.Error("the leftover slirp4netns was not killed")
	}
	if err := syscall.Kill(other.Process.Pid, 0); err != nil {
		t.Errorf("an unrelated process was killed: %v", err)
	}
	if recs, _ := filepath.Glob(filepath.Join(dir, "slirp4netns.*")); len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
}
