// Package pooltest provides a fake pool.Clock whose timers fire only when
// a test advances it, so TTL behaviour is tested without sleeping.
package pooltest

import (
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/pool"
)

// Clock is a manual clock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

var _ pool.Clock = (*Clock)(nil)

// NewClock returns a clock at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

type timer struct {
	c       *Clock
	at      time.Time
	f       func()
	stopped bool
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Now implements pool.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements pool.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) pool.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock and runs every timer that came due, in the
// caller's goroutine.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			t.stopped = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}
