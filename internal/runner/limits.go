package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
)

// Limits bound a turn (reference 3.3): its whole length, the wait for its
// first event, and a silence between events. Zero disables one.
type Limits struct {
	Total time.Duration
	TTFB  time.Duration
	Idle  time.Duration
}

// watchdog cancels a turn that breaks its limits, with a cause naming the
// limit and its setting.
type watchdog struct {
	limits Limits
	cancel context.CancelCauseFunc

	// mu guards the following.
	mu      sync.Mutex
	timer   *time.Timer
	started bool
	stopped bool
}

func startWatchdog(l Limits, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{limits: l, cancel: cancel}
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.TTFB > 0 {
		w.timer = time.AfterFunc(l.TTFB, func() {
			w.trip(fmt.Errorf("the harness sent nothing for %s (AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS)", l.TTFB))
		})
	}
	return w
}

func (w *watchdog) trip(err error) {
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if !stopped {
		w.cancel(errdefs.With(errdefs.ErrExhausted, err))
	}
}

// touch records activity: the first event ends the TTFB wait, every event
// restarts the idle clock.
func (w *watchdog) touch() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || (w.started && w.limits.Idle <= 0) {
		return
	}
	w.started = true
	if w.limits.Idle <= 0 {
		if w.timer != nil {
			w.timer.Stop()
		}
		return
	}
	if w.timer != nil && w.timer.Reset(w.limits.Idle) {
		return
	}
	idle := w.limits.Idle
	w.timer = time.AfterFunc(idle, func() {
		w.trip(fmt.Errorf("the harness was silent for %s (AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS)", idle))
	})
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}
