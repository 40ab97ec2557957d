package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/wire"
)

// Sink receives a turn's events. seq numbers the event in its session's
// log; it is 0 for transient events and for turns without a session.
type Sink func(seq int64, ev wire.Event)

// Start admits req and claims its session: the refusals a caller can fix
// (bad request, session busy, owned by another replica) come here, before
// anything is created. The returned turn must be run.
func (s *Service) Start(ctx context.Context, req *wire.Request) (*Turn, error) {
	if req.TurnID == "" {
		req.TurnID = newID()
	}
	p, err := s.admit(ctx, req)
	if err != nil {
		return nil, err
	}
	t := &turn{svc: s, plan: p, done: make(chan struct{}), index: -1, obs: turnObs{start: time.Now()},
		log: s.log.With(logkey.Session, req.SessionID, logkey.Turn, req.TurnID, logkey.Harness, p.harness.spec.Name, logkey.Provider, p.provider)}
	t.key = KeyOf(req)
	if err := s.claim(ctx, t); err != nil {
		return nil, err
	}
	if err := s.claimOwner(ctx, t); err != nil { // owner.go
		s.unclaim(t)
		return nil, err
	}
	return &Turn{t: t}, nil
}

// Turn is an admitted turn.
type Turn struct{ t *turn }

// Streamed tells the turn, before Run, that its caller streams the
// events and drops the result's list: the turn then keeps none of the
// text, so its memory does not grow with the harness's output.
func (r *Turn) Streamed() { r.t.streamed = true }

// Run runs the turn (Service.Run's contract).
func (r *Turn) Run(ctx context.Context, sink Sink) (wire.Result, error) {
	return r.t.svc.run(ctx, r.t, sink)
}

// Run admits and runs one turn: Start then Turn.Run.
func (s *Service) Run(ctx context.Context, req *wire.Request, sink Sink) (wire.Result, error) {
	t, err := s.Start(ctx, req)
	if err != nil {
		res := wire.Result{SessionID: req.SessionID, TurnID: req.TurnID, Model: req.Model, Messages: []wire.OutMessage{}, Events: []wire.Event{}}
		return failed(res, err), err
	}
	return t.Run(ctx, sink)
}

// run runs a started turn. Events go to sink as they happen (never after
// run returns); the result is always returned, ok:false on failure.
// Cancelling ctx cancels a turn without a session; a session's turn
// outlives its caller (the events stay readable from the session log) and
// stops only by /kill, DELETE or shutdown.
func (s *Service) run(ctx context.Context, t *turn, sink Sink) (wire.Result, error) {
	start := time.Now()
	req := t.plan.req
	res := wire.Result{SessionID: req.SessionID, TurnID: req.TurnID, Model: req.Model, Messages: []wire.OutMessage{}, Events: []wire.Event{}}
	if t.key.SessionID != "" {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	if s.cfg.Limits.Total > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, s.cfg.Limits.Total,
			errdefs.With(errdefs.ErrExhausted, fmt.Errorf("the turn ran longer than %s (AGENTA_RUNNER_RUN_TOTAL_TIMEOUT_MS)", s.cfg.Limits.Total)))
		defer stop()
	}
	t.cancel = cancel
	t.sink = sink
	t.watch = startWatchdog(s.cfg.Limits, cancel, modelEndpoint(t.plan.req))
	defer t.watch.stop()
	if err := s.register(t); err != nil {
		cancel(nil)
		s.unclaim(t)
		close(t.done)
		return failed(res, err), err
	}
	defer s.unregister(t)
	defer cancel(nil)

	out, err := t.run(ctx)
	if res.SessionID == "" {
		res.SessionID = t.agentSession
	}
	if err != nil && errors.Is(context.Cause(ctx), platform.ErrStopped) {
		// Stopped from the platform before the harness answered: a
		// cancellation, as when it stops a running prompt.
		err, out.StopReason = nil, agent.StopCancelled
	}
	defer func() { s.meterTurn(t, out, err) }()
	if cause := context.Cause(ctx); err == nil && out.StopReason == agent.StopCancelled && (stoppedFromOutside(cause) || errors.Is(cause, errdefs.ErrExhausted)) {
		// Stopped by the operator, not finished: the caller must not take
		// the partial output for an answer.
		err = cause
	}
	res.Output = t.outputText()
	if res.Output != "" {
		res.Messages = []wire.OutMessage{{Role: "assistant", Content: res.Output}}
	}
	res.Capabilities = t.caps
	res.TraceID = t.traceID()
	if err != nil {
		cause := context.Cause(ctx)
		limit := errors.Is(cause, errdefs.ErrExhausted)
		// A limit that trips while the harness starts kills it: the start's
		// own error ("killed by SIGKILL") hides the limit that caused it.
		if cause != nil && (limit || errors.Is(err, context.Canceled)) {
			err = cause
		}
		res = failed(res, err)
		res.Output = t.outputText()
		if out.StopReason == agent.StopCancelled || limit {
			res.StopReason = agent.StopCancelled
		}
		res.Events = t.eventList()
		t.log.Warn("turn failed", logkey.Error, err, logkey.Duration, time.Since(start).Milliseconds())
		return res, err
	}
	res.OK = true
	res.StopReason = out.StopReason
	res.Usage = out.Usage
	res.Events = t.eventList()
	t.log.Info("turn ended", "stop_reason", out.StopReason, logkey.Duration, time.Since(start).Milliseconds())
	return res, nil
}

func failed(res wire.Result, err error) wire.Result {
	res.OK = false
	res.Error = err.Error()
	return res
}
