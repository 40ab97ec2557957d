package sandboxd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// daemonLock is the daemon's claim on its state dir: an flock on
// <state-dir>/sandboxd.lock held for the daemon's whole life. Unlike a
// pid file it cannot go stale: a Daytona sandbox that is stopped and
// started again runs in a fresh pid namespace, where the pid a file
// recorded belongs to a stranger (Daytona's toolbox, say), but a lock
// dies with the process that held it. The holder of a held lock is read
// from /proc/locks, which the kernel keeps, never from the file.
type daemonLock struct {
	f *os.File
}

// lockTimeouts bound the replacement of a running daemon: SIGTERM, then
// SIGKILL after term, then give up after kill.
var lockTimeouts = struct{ term, kill time.Duration }{5 * time.Second, 5 * time.Second}

// acquireLock takes the lock on path, replacing the daemon that holds it
// (SIGTERM, then SIGKILL), so that starting the daemon again after a
// version change or a runner restart needs no separate stop.
func acquireLock(ctx context.Context, path string, logger *slog.Logger) (*daemonLock, error) {
	// os.OpenFile sets O_CLOEXEC: a process the daemon starts must not
	// inherit the descriptor, and with it the lock.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	try := func() (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return err == nil, err
	}
	ok, err := try()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		holder := lockHolder(f)
		if holder > 0 && holder != os.Getpid() {
			logger.Info("replacing the running daemon", "pid", holder)
			_ = syscall.Kill(holder, syscall.SIGTERM)
		}
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		start, killed := time.Now(), false
		for !ok {
			select {
			case <-tick.C:
			case <-ctx.Done():
				f.Close()
				return nil, ctx.Err()
			}
			if ok, err = try(); err != nil {
				f.Close()
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
			switch waited := time.Since(start); {
			case ok:
			case waited > lockTimeouts.term+lockTimeouts.kill:
				f.Close()
				return nil, fmt.Errorf("lock %s: still held by pid %d after SIGTERM and SIGKILL", path, holder)
			case waited > lockTimeouts.term && !killed && holder > 0 && holder != os.Getpid():
				_ = syscall.Kill(holder, syscall.SIGKILL)
				killed = true
			}
		}
	}
	// The pid is written for people reading the state dir; nothing trusts it.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &daemonLock{f: f}, nil
}

// release unlocks explicitly before closing: a child being forked at this
// moment holds a copy of the descriptor until it execs, and a close alone
// would leave the lock held through that copy.
func (l *daemonLock) release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}

// lockHolder returns the pid holding an flock on f's file, from
// /proc/locks (pids as this process's pid namespace sees them), or 0.
func lockHolder(f *os.File) int {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0
	}
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer locks.Close()
	// "1: FLOCK  ADVISORY  WRITE 3833 fe:00:778396 0 EOF"
	suffix := ":" + strconv.FormatUint(st.Ino, 10)
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[2] == "->" || !strings.HasSuffix(fs[5], suffix) {
			continue
		}
		if !sameDev(fs[5], uint64(st.Dev)) { // Dev is int32 on darwin
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// sameDev reports whether "maj:min:inode" names device dev.
func sameDev(field string, dev uint64) bool {
	parts := strings.Split(field, ":")
	if len(parts) != 3 {
		return false
	}
	maj, err1 := strconv.ParseUint(parts[0], 16, 32)
	mn, err2 := strconv.ParseUint(parts[1], 16, 32)
	if err1 != nil || err2 != nil {
		return false
	}
	return uint32(maj) == unix.Major(dev) && uint32(mn) == unix.Minor(dev)
}
