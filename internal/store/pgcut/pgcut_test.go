package pgcut_test

import (
	"net"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/store/pgcut"
)

// TestCutEndsWaitingReads: a read on a connection to a server that never
// answers, under a deadline far off (pgx drains a broken connection for
// 15 s), ends when the Cutter cuts, and no dial succeeds after.
func TestCutEndsWaitingReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	silent := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			silent <- c // held open, never written to
		}
		close(silent)
	}()
	cut := pgcut.New((&net.Dialer{}).DialContext)
	c, err := cut.Dial(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := <-silent; s != nil {
		defer s.Close()
	}
	read := make(chan error, 1)
	go func() {
		_ = c.SetDeadline(time.Now().Add(time.Hour))
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	cut.Cut()
	if err := <-read; err == nil {
		t.Fatal("a read after Cut returned data")
	}
	if _, err := cut.Dial(t.Context(), "tcp", ln.Addr().String()); err == nil {
		t.Fatal("a dial after Cut succeeded")
	}
}
