// Package tailbuf keeps the last bytes written to it: a capped writer for
// a child process's output that an error message quotes, so a chatty or
// hostile child cannot grow the runner's memory.
package tailbuf

import (
	"strings"
	"sync"
)

// Buffer keeps the last n bytes written to it. It is safe for concurrent
// use: exec.Cmd copies a child's output into it from its own goroutine
// while the caller may read it.
type Buffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

// New returns a Buffer that keeps n bytes.
func New(n int) *Buffer { return &Buffer{n: n} }

// Write implements io.Writer; it never fails.
func (t *Buffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
	return len(b), nil
}

// String is what is kept, without surrounding white space.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
