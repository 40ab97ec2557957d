package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// Config configures a Service.
type Config struct {
	Version         string
	DefaultProvider string
	// Harnesses is the launch table, by wire name.
	Harnesses map[string]agent.Spec
	// BaseEnv is added to every harness environment (PATH, LANG); it never
	// carries the runner's own secrets.
	BaseEnv         []string
	HistoryMaxChars int
	// TeardownTimeout bounds closing a session and destroying its sandbox.
	TeardownTimeout time.Duration
	Logger          *slog.Logger
}

// Service runs turns.
type Service struct {
	cfg       Config
	providers map[string]sandbox.Provider
	harnesses map[string]harness
	driver    agent.Driver
	log       *slog.Logger

	// mu guards the following.
	mu       sync.Mutex
	inflight map[*turn]struct{}
	closing  bool
	wg       sync.WaitGroup
}

type harness struct {
	spec agent.Spec
}

// New returns a Service over the given providers and driver.
func New(cfg Config, providers []sandbox.Provider, driver agent.Driver) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TeardownTimeout <= 0 {
		cfg.TeardownTimeout = 10 * time.Second
	}
	if cfg.HistoryMaxChars <= 0 {
		cfg.HistoryMaxChars = 100_000
	}
	s := &Service{cfg: cfg, providers: map[string]sandbox.Provider{}, harnesses: map[string]harness{}, driver: driver, log: cfg.Logger, inflight: map[*turn]struct{}{}}
	for _, p := range providers {
		s.providers[p.Name()] = p
	}
	if _, ok := s.providers[cfg.DefaultProvider]; !ok {
		return nil, fmt.Errorf("default provider %q is not among the configured providers", cfg.DefaultProvider)
	}
	for name, spec := range cfg.Harnesses {
		spec.Name = name
		s.harnesses[name] = harness{spec: spec}
	}
	return s, nil
}

func (s *Service) harnessNames() []string {
	out := make([]string, 0, len(s.harnesses))
	for n := range s.harnesses {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *Service) providerNames() []string {
	out := make([]string, 0, len(s.providers))
	for n := range s.providers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Check admits req without running it: the same refusals Run would give,
// before anything is created. The API calls it so a bad request is a 4xx,
// not a failed stream.
func (s *Service) Check(req *wire.Request) error {
	_, err := s.admit(req)
	return err
}

// Run runs one turn. Events go to sink as they happen (sink is never called
// after Run returns); the result is always returned, ok:false on failure.
// Cancelling ctx cancels the turn (ACP session/cancel) and tears it down.
func (s *Service) Run(ctx context.Context, req *wire.Request, sink func(wire.Event)) (wire.Result, error) {
	start := time.Now()
	if req.TurnID == "" {
		req.TurnID = newID()
	}
	res := wire.Result{SessionID: req.SessionID, TurnID: req.TurnID, Model: req.Model, Messages: []wire.OutMessage{}, Events: []wire.Event{}}
	p, err := s.admit(req)
	if err != nil {
		return failed(res, err), err
	}
	t := &turn{svc: s, plan: p, sink: sink, done: make(chan struct{}), log: s.log.With(logkey.Session, req.SessionID, logkey.Turn, req.TurnID, logkey.Harness, p.harness.spec.Name, logkey.Provider, p.provider)}
	ctx, cancel := context.WithCancelCause(ctx)
	t.cancel = cancel
	if err := s.register(t); err != nil {
		cancel(nil)
		return failed(res, err), err
	}
	defer s.unregister(t)
	defer cancel(nil)

	out, err := t.run(ctx)
	if cause := context.Cause(ctx); err == nil && out.StopReason == agent.StopCancelled && (errors.Is(cause, errKilled) || errors.Is(cause, errShutdown)) {
		// Stopped by the operator, not finished: the caller must not take
		// the partial output for an answer.
		err = cause
	}
	res.Output = t.output.String()
	if res.Output != "" {
		res.Messages = []wire.OutMessage{{Role: "assistant", Content: res.Output}}
	}
	res.Capabilities = t.caps
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && errors.Is(err, context.Canceled) {
			err = cause
		}
		stop := "error"
		if out.StopReason == agent.StopCancelled {
			stop = agent.StopCancelled
		}
		t.emit(wire.Event{Type: wire.EventError, Message: err.Error()})
		t.emit(wire.Event{Type: wire.EventDone, StopReason: stop})
		t.log.Warn("turn failed", logkey.Error, err, logkey.Duration, time.Since(start).Milliseconds())
		res = failed(res, err)
		res.Output = t.output.String()
		if out.StopReason == agent.StopCancelled {
			res.StopReason = agent.StopCancelled
		}
		res.Events = t.events
		return res, err
	}
	res.OK = true
	res.StopReason = out.StopReason
	if out.Usage != nil {
		res.Usage = out.Usage
		t.emit(wire.UsageEvent(*out.Usage))
	}
	t.emit(wire.Event{Type: wire.EventDone, StopReason: out.StopReason})
	res.Events = t.events
	t.log.Info("turn ended", "stop_reason", out.StopReason, logkey.Duration, time.Since(start).Milliseconds())
	return res, nil
}

func failed(res wire.Result, err error) wire.Result {
	res.OK = false
	res.Error = err.Error()
	return res
}

func (s *Service) register(t *turn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errdefs.With(errdefs.ErrUnavailable, errors.New("runner is shutting down"))
	}
	s.inflight[t] = struct{}{}
	return nil
}

func (s *Service) unregister(t *turn) {
	s.mu.Lock()
	delete(s.inflight, t)
	s.mu.Unlock()
}

// errKilled is the cause of a turn stopped by /kill.
var errKilled = errors.New("turn killed by /kill")

// errShutdown is the cause of a turn stopped by runner shutdown.
var errShutdown = errors.New("runner is shutting down")

// Kill cancels every in-flight turn of the session in the project and
// waits (bounded by ctx) for their teardown. It returns how many it stopped.
func (s *Service) Kill(ctx context.Context, sessionID, projectID string) int {
	s.mu.Lock()
	var hit []*turn
	for t := range s.inflight {
		r := t.plan.req
		if r.SessionID == sessionID && projectOf(r) == projectID {
			hit = append(hit, t)
		}
	}
	s.mu.Unlock()
	for _, t := range hit {
		t.cancel(errKilled)
	}
	for _, t := range hit {
		t.waitDone(ctx)
	}
	return len(hit)
}

func projectOf(r *wire.Request) string {
	if r.RunContext != nil && r.RunContext.Project != nil && r.RunContext.Project.ID != "" {
		return r.RunContext.Project.ID
	}
	return r.ProjectID
}

// Shutdown refuses new turns, cancels in-flight ones and waits for their
// teardown, bounded by ctx.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	turns := make([]*turn, 0, len(s.inflight))
	for t := range s.inflight {
		turns = append(turns, t)
	}
	s.mu.Unlock()
	for _, t := range turns {
		t.cancel(errShutdown)
	}
	for _, t := range turns {
		t.waitDone(ctx)
	}
	return ctx.Err()
}

// InFlight is the number of running turns.
func (s *Service) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// Harnesses describes the launch table for /health.
func (s *Service) Harnesses() []string { return s.harnessNames() }

// Providers describes the providers for /health.
func (s *Service) Providers() map[string]any {
	out := map[string]any{}
	for name, p := range s.providers {
		d := map[string]any{}
		if ds, ok := p.(sandbox.Describer); ok {
			d = ds.Describe()
		}
		out[name] = d
	}
	return out
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return strings.Join([]string{h[:8], h[8:12], h[12:16], h[16:20], h[20:]}, "-")
}
