// Package lograte is a slog.Handler that keeps a burst of identical
// warnings and errors from flooding the log: the first of a burst is
// written at once, the identical ones after it only counted, and the
// count written as one record (the first's, with repeated=N) when the
// window that follows ends — once per window while the burst lasts, then
// nothing. Identical means the same level, message and attributes (the
// handler's and the record's), the time aside. Records below Warn pass
// through untouched, and so does everything once maxKeys distinct bursts
// are being counted.
package lograte

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// maxKeys bounds the bursts counted at once.
const maxKeys = 1024

// Handler rate-limits identical records; Close writes the counts left.
type Handler struct {
	next   slog.Handler
	prefix string // the handler's own attributes and groups, as a key
	st     *state
}

var _ slog.Handler = (*Handler)(nil)

type state struct {
	window time.Duration

	// mu guards the following.
	mu      sync.Mutex
	bursts  map[string]*burst
	closing bool
}

type burst struct {
	next  slog.Handler // the handler the first record went to
	first slog.Record
	count int // identical records since the last write
	timer *time.Timer
}

// New returns a Handler writing to next, counting each burst for window.
func New(next slog.Handler, window time.Duration) *Handler {
	return &Handler{next: next, st: &state{window: window, bursts: map[string]*burst{}}}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	var k strings.Builder
	k.WriteString(h.prefix)
	k.WriteString(r.Level.String())
	k.WriteByte(0)
	k.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		k.WriteByte(0)
		k.WriteString(a.String())
		return true
	})
	key := k.String()
	st := h.st
	st.mu.Lock()
	if b := st.bursts[key]; b != nil {
		b.count++
		st.mu.Unlock()
		return nil
	}
	if !st.closing && len(st.bursts) < maxKeys {
		b := &burst{next: h.next, first: r.Clone()}
		b.timer = time.AfterFunc(st.window, func() { st.flush(key, b) })
		st.bursts[key] = b
	}
	st.mu.Unlock()
	return h.next.Handle(ctx, r)
}

// flush ends b's window: it writes the count, if any, and counts one more
// window, or forgets b when nothing repeated.
func (st *state) flush(key string, b *burst) {
	st.mu.Lock()
	if st.bursts[key] != b {
		st.mu.Unlock()
		return // Close wrote it
	}
	n := b.count
	if n == 0 {
		delete(st.bursts, key)
		st.mu.Unlock()
		return
	}
	b.count = 0
	b.timer.Reset(st.window)
	st.mu.Unlock()
	b.write(n, st.window)
}

func (b *burst) write(n int, window time.Duration) {
	r := slog.NewRecord(time.Now(), b.first.Level, b.first.Message, b.first.PC)
	b.first.Attrs(func(a slog.Attr) bool {
		r.AddAttrs(a)
		return true
	})
	r.AddAttrs(slog.Int("repeated", n), slog.Duration("within", window))
	_ = b.next.Handle(context.Background(), r)
}

// Close writes the counts of the bursts under way and stops counting:
// records after it pass through.
func (h *Handler) Close() {
	st := h.st
	st.mu.Lock()
	st.closing = true
	bursts := st.bursts
	st.bursts = map[string]*burst{}
	st.mu.Unlock()
	for _, b := range bursts {
		b.timer.Stop()
		if b.count > 0 {
			b.write(b.count, st.window)
		}
	}
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	var k strings.Builder
	k.WriteString(h.prefix)
	for _, a := range as {
		k.WriteString(a.String())
		k.WriteByte(0)
	}
	return &Handler{next: h.next.WithAttrs(as), prefix: k.String(), st: h.st}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), prefix: h.prefix + "[" + name + "]\x00", st: h.st}
}
