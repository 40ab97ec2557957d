package sandboxd

import (
	"bufio"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// stranger starts a process that is not a daemon and returns it; it is
// killed when the test ends.
func stranger(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// running reports whether pid runs and is not a zombie: a process killed
// but not yet reaped counts as dead.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i+2 < len(s) && s[i+2] != 'Z'
}

// After a Daytona sandbox restarts, pids start again from 1 and the pid
// of the daemon from before the stop belongs to a stranger (Daytona's own
// toolbox). Whatever the state dir says, the new daemon must not signal it.
func TestMainLeavesAStalePidAlone(t *testing.T) {
	t.Parallel()
	home := shortTempDir(t)
	victim := stranger(t)
	state := filepath.Join(home, ".runner-sandboxd")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	pid := []byte(strconv.Itoa(victim.Process.Pid))
	for _, name := range []string{"sandboxd.pid", "sandboxd.lock"} {
		if err := os.WriteFile(filepath.Join(state, name), pid, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := startMain(t, home)
	if !running(victim.Process.Pid) {
		t.Fatalf("the daemon killed pid %d, a stranger named in the stale state dir; stderr:\n%s", victim.Process.Pid, d.stderr.String())
	}
}

// A daemon that really runs (it holds the lock) is replaced: SIGTERM to
// the holder the kernel names, then the lock is taken.
func TestMainReplacesTheLockHolder(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs flock(1) (util-linux) to hold the lock from another process")
	}
	home := shortTempDir(t)
	state := filepath.Join(home, ".runner-sandboxd")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	// --no-fork: the holder is the process that runs the command.
	holder := exec.Command("flock", "--no-fork", filepath.Join(state, "sandboxd.lock"), "sh", "-c", "echo locked; exec sleep 600")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("holder said %q", line)
	}
	startMain(t, home)
	err = holder.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("holder ended with %v, want SIGTERM", err)
	}
}

// release unlocks even while a copy of the descriptor lives on, as in a
// child forked at that moment that has not exec'd yet.
func TestLockReleaseDespiteInheritedCopy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sandboxd.lock")
	l, err := acquireLock(t.Context(), path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if lockHolder(l.f) != os.Getpid() {
		t.Errorf("lockHolder = %d, want this process %d", lockHolder(l.f), os.Getpid())
	}
	dup, err := syscall.Dup(int(l.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dup)
	l.release()
	if !lockable(t, path) {
		t.Fatal("the lock is still held through the copy after release")
	}
}
