package local

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Without a PID namespace (isolation none) a harness's process group is
// all that holds what it started: Claude Code's adapter runs the Claude
// CLI, which runs `claude auth status`, MCP servers and shells. When the
// harness exits (on its own, on stdin's end, or killed), whatever it left
// in its group would run on, writing into its sandbox while the sandbox
// is removed and after the runner stopped. So the group goes with its
// leader: killed, and waited for, before the process counts as ended.
// A process that left the group (setsid, setpgid) is beyond this; bwrap's
// PID namespace holds those too.

// groupWait bounds the wait for a killed group's members to exit: a
// process stuck in the kernel (D state on a dead mount) outlives SIGKILL.
const groupWait = 5 * time.Second

// endGroup waits for the group leader pid to exit without reaping it (its
// zombie keeps the group's id from being reused meanwhile), kills what is
// left of its process group and waits, up to groupWait, until no member
// is alive. The caller reaps the leader afterwards.
func endGroup(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break // exited, or not our child (ECHILD): nothing to hold
		}
	}
	_ = unix.Kill(-pid, unix.SIGKILL)
	deadline := time.Now().Add(groupWait)
	for {
		members := groupMembers(pid)
		if len(members) == 0 || !time.Now().Before(deadline) {
			return
		}
		waitExit(members, time.Until(deadline))
	}
}

// groupMembers are the live processes of process group pgid other than
// its leader (the caller's child, not reaped yet). A zombie is not live:
// it writes nothing, and who reaps it is its new parent's business.
func groupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if g, state, ok := procGroup(pid); ok && g == pgid && state != 'Z' && state != 'X' {
			out = append(out, pid)
		}
	}
	return out
}

// procGroup reads a process's group and state from /proc/<pid>/stat.
func procGroup(pid int) (pgid int, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	g, err := strconv.Atoi(string(f[2]))
	return g, f[0][0], err == nil
}

// rescanPause bounds a wait that cannot watch every member: the caller
// then looks at /proc again after it, instead of at once in a busy loop.
const rescanPause = 50 * time.Millisecond

// pidfdOpen and poll are the system calls waitExit makes; a test replaces
// them to see what it does when pidfds run out.
var (
	pidfdOpen = func(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }
	poll      = unix.Poll
)

// waitExit waits until one of pids has exited, or for d at most: a
// pidfd is readable once its process is dead. A pid already gone ends the
// wait at once (the caller looks again). A pidfd that cannot be opened for
// another reason (the process is out of descriptors) leaves that member
// unwatched, so the wait is cut to rescanPause; with none watched it is a
// plain pause.
func waitExit(pids []int, d time.Duration) {
	var fds []unix.PollFd
	unwatched := false
	for _, pid := range pids {
		fd, err := pidfdOpen(pid)
		if errors.Is(err, unix.ESRCH) {
			return
		}
		if err != nil {
			unwatched = true
			continue
		}
		defer unix.Close(fd)
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	if unwatched {
		d = min(d, rescanPause)
	}
	ms := int(d.Milliseconds()) + 1
	for {
		if _, err := poll(fds, ms); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
