package local

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitExitWithoutPidfds: when pidfds cannot be opened (the runner out
// of descriptors), waitExit still waits — a bounded pause — instead of
// returning at once, which made endGroup rescan /proc in a busy loop for
// the whole of groupWait.
func TestWaitExitWithoutPidfds(t *testing.T) {
	var timeouts []int
	oldOpen, oldPoll := pidfdOpen, poll
	t.Cleanup(func() { pidfdOpen, poll = oldOpen, oldPoll })
	pidfdOpen = func(int) (int, error) { return -1, unix.EMFILE }
	poll = func(fds []unix.PollFd, ms int) (int, error) {
		timeouts = append(timeouts, ms)
		return 0, nil
	}
	waitExit([]int{os.Getpid()}, groupWait)
	if len(timeouts) != 1 || timeouts[0] <= 0 || timeouts[0] > int(rescanPause.Milliseconds())+1 {
		t.Fatalf("poll timeouts = %v ms, want one pause of at most %v", timeouts, rescanPause)
	}

	// A member already gone ends the wait at once: the caller looks again.
	timeouts = nil
	pidfdOpen = func(int) (int, error) { return -1, unix.ESRCH }
	waitExit([]int{os.Getpid()}, groupWait)
	if len(timeouts) != 0 {
		t.Fatalf("a gone member waited: poll timeouts = %v", timeouts)
	}

	// Every member watched: the whole wait is given to poll.
	timeouts = nil
	pidfdOpen = oldOpen
	waitExit([]int{os.Getpid()}, time.Second)
	if len(timeouts) != 1 || timeouts[0] != 1001 {
		t.Fatalf("poll timeouts = %v ms, want [1001]", timeouts)
	}
}
