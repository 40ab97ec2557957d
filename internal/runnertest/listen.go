package runnertest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// Listen opens the loopback socket an in-process serve accepts on, so no
// port is picked, freed and raced for; base is its URL. It is closed at
// cleanup, for a serve that never took it.
func Listen(tb testing.TB) (ln net.Listener, base string) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln, "http://" + ln.Addr().String()
}

// Socket is Listen for a serve process: the socket as a file to pass as
// fd 3 with LISTEN_FDS=1 (socket activation). The file is closed at
// cleanup; a caller that hands the socket to one process only may close
// it sooner, so that a runner dying at boot leaves nothing accepting.
func Socket(tb testing.TB) (f *os.File, base string) {
	tb.Helper()
	ln, base := Listen(tb)
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		tb.Fatal(err)
	}
	ln.Close() // f holds the socket
	tb.Cleanup(func() { f.Close() })
	return f, base
}

// WaitHealthy polls base's /health until it answers 200. It fails the
// test after a minute (or 5 s before the test's deadline, a loaded
// machine starts slowly), or as soon as exited is closed (nil: never),
// with log's content (nil: none).
func WaitHealthy(tb testing.TB, base string, exited <-chan struct{}, log fmt.Stringer) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := t.Deadline(); ok && d.Add(-5*time.Second).Before(deadline) {
			deadline = d.Add(-5 * time.Second)
		}
	}
	logged := func() string {
		if log == nil {
			return ""
		}
		return "\n" + log.String()
	}
	probe := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := probe.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-exited:
			tb.Fatalf("runner serve exited before answering /health:%s", logged())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("runner serve did not answer /health in time (%v):%s", err, logged())
		}
	}
}
