package runnertest

import (
	"bytes"
	"context"
	"sync"
)

// SyncBuffer is a bytes.Buffer that one goroutine may write (a server's
// log) while another reads it (the test), or waits for a line in it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// changed is closed by the next Write, for WaitFor; nil when nobody
	// waits.
	changed chan struct{}
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

// String is what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor waits until a line written holds every one of parts (a server's
// log line saying that something happened), or ctx ends; it reports
// whether it saw one. It waits on the writes, never polls.
func (s *SyncBuffer) WaitFor(ctx context.Context, parts ...string) bool {
	return s.WaitForN(ctx, 1, parts...)
}

// WaitForN is WaitFor for n such lines (the n-th time something happened).
func (s *SyncBuffer) WaitForN(ctx context.Context, n int, parts ...string) bool {
	for {
		s.mu.Lock()
		if countLines(s.b.Bytes(), parts) >= n {
			s.mu.Unlock()
			return true
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// countLines counts the lines of b that hold every one of parts.
func countLines(b []byte, parts []string) int {
	n := 0
	for line := range bytes.Lines(b) {
		all := true
		for _, p := range parts {
			if !bytes.Contains(line, []byte(p)) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}
