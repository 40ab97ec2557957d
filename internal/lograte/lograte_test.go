package lograte_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/lograte"
)

// lockedBuffer is written by the handler and by its timers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

func newLogger(window time.Duration) (*slog.Logger, *lograte.Handler, *lockedBuffer) {
	var buf lockedBuffer
	h := lograte.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}), window)
	return slog.New(h), h, &buf
}

// A burst of identical errors is one line and, when it ends, its count;
// other records, and info, pass through.
func TestBurst(t *testing.T) {
	log, h, buf := newLogger(time.Hour)
	tl := log.With("session", "s1")
	for range 1000 {
		tl.Error("event log append failed", "error", errors.New("disk full"), "events", 3)
	}
	tl.Error("event log append failed", "error", errors.New("disk full"), "events", 4)  // not identical
	log.Error("event log append failed", "error", errors.New("disk full"), "events", 3) // nor this: no session
	tl.Info("turn ended")
	tl.Info("turn ended")
	h.Close()
	want := []string{
		`level=ERROR msg="event log append failed" session=s1 error="disk full" events=3`,
		`level=ERROR msg="event log append failed" session=s1 error="disk full" events=4`,
		`level=ERROR msg="event log append failed" error="disk full" events=3`,
		`level=INFO msg="turn ended" session=s1`,
		`level=INFO msg="turn ended" session=s1`,
		`level=ERROR msg="event log append failed" session=s1 error="disk full" events=3 repeated=999 within=1h0m0s`,
	}
	if d := cmp.Diff(want, buf.lines()); d != "" {
		t.Fatalf("log (-want +got):\n%s", d)
	}
}

// The window's end writes the count without Close: every record is
// accounted for, first lines plus counts.
func TestWindowEnds(t *testing.T) {
	log, h, buf := newLogger(time.Millisecond)
	defer h.Close()
	const n = 500
	for range n {
		log.Warn("lease lost", "error", "reset")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		total := 0
		for _, l := range buf.lines() {
			total++
			if _, c, ok := strings.Cut(l, "repeated="); ok {
				k, _ := strconv.Atoi(strings.Fields(c)[0])
				total += k - 1
			}
		}
		if total == n {
			return
		}
		if total > n {
			t.Fatalf("%d records accounted for, want %d:\n%s", total, n, strings.Join(buf.lines(), "\n"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the count was never written:\n%s", strings.Join(buf.lines(), "\n"))
		}
		time.Sleep(time.Millisecond)
	}
}
