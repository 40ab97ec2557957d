package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// Limits bound a turn (docs/contract.md, Run limits): its whole length, the wait for its
// first event, a silence between events, and one tool call from its
// announcement to its result. Zero disables one.
type Limits struct {
	Total    time.Duration
	TTFB     time.Duration
	Idle     time.Duration
	ToolCall time.Duration
}

// maxTimedToolCalls bounds the tool calls a turn times at once: a harness
// that announces calls without end cannot grow the runner's memory. Calls
// beyond it go untimed (the idle and total limits still hold).
const maxTimedToolCalls = 1024

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
	tools   map[string]*time.Timer // open tool calls by id
}

// startWatchdog starts the turn's limits. endpoint, when known, is the
// model endpoint the harness calls: a harness that sends nothing is most
// often one that cannot reach it, so the TTFB error names it.
func startWatchdog(l Limits, cancel context.CancelCauseFunc, endpoint string) *watchdog {
	w := &watchdog{limits: l, cancel: cancel}
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.TTFB > 0 {
		hint := ""
		if endpoint != "" {
			hint = "; check that the harness reaches its model endpoint " + endpoint
		}
		w.timer = time.AfterFunc(l.TTFB, func() {
			w.trip(fmt.Errorf("the harness sent nothing for %s (AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS)%s", l.TTFB, hint))
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

// toolCall times the tool call id from its first announcement; a later
// announcement of the same call (its arguments grew) does not restart it.
func (w *watchdog) toolCall(id, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.limits.ToolCall <= 0 || id == "" || len(w.tools) >= maxTimedToolCalls {
		return
	}
	if _, ok := w.tools[id]; ok {
		return
	}
	if w.tools == nil {
		w.tools = make(map[string]*time.Timer)
	}
	limit := w.limits.ToolCall
	w.tools[id] = time.AfterFunc(limit, func() {
		w.trip(fmt.Errorf("tool call %.64q (%.64q) ran longer than %s without a result (AGENTA_RUNNER_TOOL_CALL_TIMEOUT_MS)", id, name, limit))
	})
}

// toolResult ends the timing of the tool call id.
func (w *watchdog) toolResult(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if tm, ok := w.tools[id]; ok {
		tm.Stop()
		delete(w.tools, id)
	}
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	for id, tm := range w.tools {
		tm.Stop()
		delete(w.tools, id)
	}
}

// modelEndpoint is the model endpoint a request names, for errors: the
// base URL without its query (which may carry a key).
func modelEndpoint(req *wire.Request) string {
	if req == nil || req.ModelConnection == nil || req.ModelConnection.Endpoint == nil {
		return ""
	}
	u := req.ModelConnection.Endpoint.BaseURL
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	return u
}
