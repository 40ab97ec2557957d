package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/eventlog"
	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace"
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
	// EventCommitDelay is how long a turn's events may wait in memory
	// before its event log starts committing (default 10 ms): a turn that
	// ends sooner is committed whole, in one transaction.
	EventCommitDelay time.Duration
	// WarmProbeIdle is how long a warm session may sit idle before its
	// sandbox is probed (sandbox.Prober) before reuse; zero means
	// DefaultWarmProbeIdle, negative never (fallback.go).
	WarmProbeIdle time.Duration

	// ReplicaID names this runner in the turn ledger and session leases;
	// it must survive restarts for crash recovery to find its turns.
	ReplicaID string
	// KeepAlive keeps harnesses warm between turns of a session.
	KeepAlive   bool
	PoolMax     int
	SessionTTL  time.Duration
	ApprovalTTL time.Duration
	// LeaseTTL is how long a running turn's session lease lasts between
	// renewals (renewed at a third of it).
	LeaseTTL time.Duration
	// PoolClock drives warm-session timers; nil is the real clock.
	PoolClock pool.Clock
	// Pools overrides, per provider, whether and how long sessions stay
	// warm; a provider without an entry uses KeepAlive, PoolMax,
	// SessionTTL and ApprovalTTL.
	Pools map[string]PoolConfig
	// Gateway, when set, keeps opaque_http model keys out of sandboxes
	// that share the runner's host: harnesses get placeholders.
	Gateway *gateway.Gateway
	// Egress is the refused-range policy (internal/sandbox/egress) a
	// request's model endpoint and allowlist entries are admitted by; nil
	// is the strict one, with nothing opened by the operator.
	Egress *egress.Policy
	// ModelForwardAddr is where, inside a remote sandbox, the forward to
	// the key gateway listens; default 127.0.0.1:47811.
	ModelForwardAddr string
	// Limits bound every turn; zero fields disable a limit.
	Limits Limits
	// Caps bound what a turn holds (caps.go); zero fields take defaults.
	Caps Caps
	// Tools serves customTools; its zero value refuses them.
	Tools ToolsConfig
	// Configure, if set, generates each harness's own configuration from
	// the request (installed command, config files, env, mode).
	Configure Configurer
	// Binds are host paths every sandbox sees at the same path: the
	// installed harnesses, which may lie in the data dir that isolated
	// sandboxes otherwise do not see.
	Binds []sandbox.Bind
	// Workdir, if set, is a host directory every harness works in instead
	// of a fresh workspace (`runner run -workdir`); only providers that
	// share the runner's filesystem can honour it.
	Workdir string
	// SecretRefusal, per provider, refuses requests whose credentials that
	// provider cannot keep out of its sandboxes, with this message naming
	// the setting to change. Empty: the provider may see them.
	SecretRefusal map[string]string
	// Workspaces, if set, keeps sessions' files and agents' folders in a
	// durable store (durable.go); CheckpointEvery is how often a running
	// turn checkpoints them (default 30s).
	Workspaces      workspace.Resolver
	CheckpointEvery time.Duration
	// Mounter, if set (AGENTA_RUNNER_WORKSPACE_MODE=fuse), mounts the
	// working directory from its store instead of restoring and
	// checkpointing it (durable_fuse.go).
	Mounter workspace.Mounter
	// DenyAllPermissions is the incident kill switch: every permission
	// request and tool call is denied.
	DenyAllPermissions bool
	// Observers follow every session turn (the platform mirror, traces).
	Observers []platform.Observer
	// OwnerClaimTimeout bounds the platform's answer to a cold turn's
	// owner claim (owner.go); default 2s.
	OwnerClaimTimeout time.Duration

	// Metrics is told of turns, tool calls and approvals; nil observes
	// nothing.
	Metrics metrics.Observer

	Logger *slog.Logger
}

// PoolConfig is one provider's warm pool.
type PoolConfig struct {
	Enabled     bool
	Max         int
	IdleTTL     time.Duration
	ApprovalTTL time.Duration
}

// Service runs turns.
type Service struct {
	cfg       Config
	providers map[string]sandbox.Provider
	harnesses map[string]harness
	driver    agent.Driver
	store     store.Store
	pools     map[string]*pool.Pool // by provider; absent = no keep-alive
	hubs      eventlog.Hubs
	health    storeHealth // storewatch.go
	log       *slog.Logger

	// mu guards the following.
	mu       sync.Mutex
	inflight map[*turn]struct{}
	busy     map[store.SessionKey]*turn // session -> its running turn
	closing  bool
	draining bool // Drain began: no new turns, the running ones finish
	// held caches, per session this replica holds the lease of, when the
	// lease ends and the session record as its last turn left it: while
	// the lease holds nobody else writes the session, so a warm turn needs
	// neither a lease write nor a session read.
	held map[store.SessionKey]heldSession
	// paused caches, per session whose last turn paused, what a decision
	// arriving through /v1 needs beyond the store's resume record
	// (store.Resumes): the request's secrets, which are not written to
	// disk (nil when it had none). With a store that cannot keep resume
	// records it holds the whole request.
	paused map[store.SessionKey]*wire.Request
}

type harness struct {
	spec agent.Spec
}

// New returns a Service over the given providers, driver and store.
func New(cfg Config, providers []sandbox.Provider, driver agent.Driver, st store.Store) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.Nop{}
	}
	if cfg.Egress == nil {
		var err error
		if cfg.Egress, err = egress.New(nil); err != nil {
			return nil, err
		}
	}
	if cfg.EventCommitDelay <= 0 {
		cfg.EventCommitDelay = eventlog.DefaultCommitDelay
	}
	if cfg.TeardownTimeout <= 0 {
		cfg.TeardownTimeout = 10 * time.Second
	}
	cfg.Caps = cfg.Caps.withDefaults()
	if cfg.HistoryMaxChars <= 0 {
		cfg.HistoryMaxChars = 100_000
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = time.Minute
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = 10 * time.Minute
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 90 * time.Second
	}
	if cfg.OwnerClaimTimeout <= 0 {
		cfg.OwnerClaimTimeout = 2 * time.Second
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = "replica-" + newID()[:8]
	}
	if st == nil {
		return nil, errors.New("runner: a store is required")
	}
	s := &Service{
		cfg: cfg, providers: map[string]sandbox.Provider{}, harnesses: map[string]harness{},
		driver: driver, store: st, log: cfg.Logger,
		inflight: map[*turn]struct{}{}, busy: map[store.SessionKey]*turn{}, paused: map[store.SessionKey]*wire.Request{}, held: map[store.SessionKey]heldSession{},
		health: storeHealth{wake: make(chan struct{}, 1), pending: map[turnRef]store.Turn{}},
	}
	s.pools = map[string]*pool.Pool{}
	for _, p := range providers {
		s.providers[p.Name()] = p
		pc, ok := cfg.Pools[p.Name()]
		if !ok {
			pc = PoolConfig{Enabled: cfg.KeepAlive, Max: cfg.PoolMax, IdleTTL: cfg.SessionTTL, ApprovalTTL: cfg.ApprovalTTL}
		}
		if !pc.Enabled {
			continue
		}
		if pc.ApprovalTTL <= 0 {
			pc.ApprovalTTL = cfg.ApprovalTTL
		}
		s.pools[p.Name()] = pool.New(pool.Config{
			Max: pc.Max, IdleTTL: pc.IdleTTL, ApprovalTTL: pc.ApprovalTTL,
			TeardownTimeout: cfg.TeardownTimeout, Clock: cfg.PoolClock, Logger: cfg.Logger.With(logkey.Provider, p.Name()),
		})
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

// Recover runs once at start-up, before the first turn: turns this replica
// was running when it died are marked interrupted, and sandboxes it left
// are reaped. It returns how many turns it marked.
func (s *Service) Recover(ctx context.Context) (int, error) {
	n, err := s.store.InterruptTurns(ctx, s.cfg.ReplicaID, time.Now())
	if err != nil {
		return 0, fmt.Errorf("mark interrupted turns: %w", err)
	}
	if n > 0 {
		s.log.Warn("turns interrupted by the previous stop of this replica", "turns", n)
	}
	for name, p := range s.providers {
		recs, err := s.store.ListSandboxes(ctx, store.SandboxQuery{Provider: name})
		if err != nil {
			return n, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, rec := range recs {
			if rec.State == store.SandboxDestroyed {
				continue
			}
			s.reap(ctx, p, rec)
		}
	}
	return n, nil
}

// reap deals with a sandbox an earlier process left. A remote sandbox
// outlives the runner: it is kept for its session's next turn (which
// reopens it) unless that session is gone. A local one lost its harness
// with the process that started it; what is left is its directory.
func (s *Service) reap(ctx context.Context, p sandbox.Provider, rec store.Sandbox) {
	log := s.log.With(logkey.Sandbox, rec.ID, logkey.Provider, rec.Provider)
	if r, ok := p.(sandbox.Remover); ok {
		sess, err := s.store.GetSession(ctx, rec.SessionKey())
		if err == nil && sess.Status == store.SessionActive && sess.SandboxID == rec.ID {
			if rec.State == store.SandboxRunning {
				rec.State = store.SandboxPaused // reopenable; its harness must restart
				_, _ = s.store.PutSandbox(ctx, rec)
			}
			log.Info("kept the session's sandbox for its next turn")
			return
		}
		if err := r.Remove(ctx, rec.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			log.Warn("reap orphaned sandbox", logkey.Error, err)
			return
		}
	} else if o, ok := p.(sandbox.Opener); ok {
		sb, err := o.Open(ctx, rec.ID, sandbox.Spec{SessionID: rec.SessionID})
		switch {
		case err == nil:
			if err := sb.Destroy(ctx); err != nil {
				log.Warn("reap orphaned sandbox", logkey.Error, err)
				return
			}
		case !errors.Is(err, errdefs.ErrNotFound):
			log.Warn("reap orphaned sandbox", logkey.Error, err)
			return
		}
	}
	rec.State = store.SandboxDestroyed
	if _, err := s.store.PutSandbox(ctx, rec); err != nil {
		log.Warn("record reaped sandbox", logkey.Error, err)
		return
	}
	log.Info("reaped orphaned sandbox")
}

func (s *Service) harnessNames() []string { return slices.Sorted(maps.Keys(s.harnesses)) }

func (s *Service) providerNames() []string { return slices.Sorted(maps.Keys(s.providers)) }

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

// claim makes t the session's only running turn on this replica and takes
// the session's lease, so no other replica runs it at the same time.
func (s *Service) claim(ctx context.Context, t *turn) error {
	s.mu.Lock()
	if s.closing || s.draining {
		s.mu.Unlock()
		return errDraining
	}
	if t.key.SessionID != "" {
		if other, ok := s.busy[t.key]; ok {
			s.mu.Unlock()
			return errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s already has a turn in flight (turn %s); wait for its result, or POST /kill to stop it", t.plan.req.SessionID, other.plan.req.TurnID))
		}
		s.busy[t.key] = t
	}
	s.mu.Unlock()
	if t.key.SessionID == "" {
		return nil
	}
	now := time.Now()
	if h, ok := s.heldLease(t.key); ok && h.until.After(now.Add(s.cfg.LeaseTTL/2)) {
		t.leaseUntil = h.until
		t.cached = h.session
		return nil
	}
	if _, err := s.store.AcquireLease(ctx, t.key, s.cfg.ReplicaID, now, s.cfg.LeaseTTL); err != nil {
		s.unclaim(t)
		var le *store.LeaseError
		if errors.As(err, &le) {
			return errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s is running on replica %s until %s; retry after that or send the turn to that replica", t.key, le.Owner, le.Expires.UTC().Format(time.RFC3339)))
		}
		return s.storeFailed("did not lease session "+t.key.String(), err)
	}
	t.leaseUntil = now.Add(s.cfg.LeaseTTL)
	return nil
}

// heldSession is what this replica knows of a session it holds.
type heldSession struct {
	until   time.Time
	session *store.Session // nil when unknown
}

func (s *Service) heldLease(k store.SessionKey) (heldSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[k]
	return h, ok
}

// hold records this replica's lease on a session (until) and, when known,
// the session record as it now stands.
func (s *Service) hold(k store.SessionKey, until time.Time, sess *store.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[k] = heldSession{until: until, session: sess}
}

func (s *Service) forgetHold(k store.SessionKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, k)
}

func (s *Service) unclaim(t *turn) {
	if t.key.SessionID == "" {
		return
	}
	s.mu.Lock()
	if s.busy[t.key] == t {
		delete(s.busy, t.key)
	}
	s.mu.Unlock()
}

func (s *Service) register(t *turn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.draining {
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

var (
	errKilled   = errors.New("turn killed by /kill")
	errShutdown = errors.New("runner is shutting down")
	errDeleted  = errors.New("session deleted")
)

// stoppedFromOutside reports a cause that stopped a turn from outside it:
// /kill, the shutdown, the session's deletion.
func stoppedFromOutside(err error) bool {
	return errors.Is(err, errKilled) || errors.Is(err, errShutdown) || errors.Is(err, errDeleted)
}

// Kill cancels the session's in-flight turn in the project, releases its
// warm harness and waits (bounded by ctx) for the teardown. It returns how
// many turns it stopped.
//
// A turn whose request named no project (Agenta's services never send
// one on a run) matches by session id, unless the platform told us its
// project and that is another one.
func (s *Service) Kill(ctx context.Context, sessionID, projectID string) int {
	key := store.SessionKey{ProjectID: projectID, SessionID: sessionID}
	bare := store.SessionKey{SessionID: sessionID}
	n := s.stopTurns(ctx, errKilled, func(t *turn) bool {
		if t.key == key {
			return true
		}
		return t.key == bare && (t.project == "" || t.project == projectID)
	})
	s.evict(key, pool.ReasonKill)
	s.evict(bare, pool.ReasonKill)
	return n
}

// KillSession cancels the in-flight turn of exactly session k (no turn
// that named no project), releases its warm harness and waits, as Kill.
func (s *Service) KillSession(ctx context.Context, k store.SessionKey) int {
	n := s.stopSession(ctx, k, errKilled)
	s.evict(k, pool.ReasonKill)
	return n
}

func (s *Service) stopSession(ctx context.Context, key store.SessionKey, cause error) int {
	return s.stopTurns(ctx, cause, func(t *turn) bool { return t.key == key })
}

// stopTurns cancels the in-flight turns match selects (called under
// s.mu) and waits for them, bounded by ctx.
func (s *Service) stopTurns(ctx context.Context, cause error, match func(*turn) bool) int {
	s.mu.Lock()
	var hit []*turn
	for t := range s.inflight {
		if match(t) {
			hit = append(hit, t)
		}
	}
	s.mu.Unlock()
	for _, t := range hit {
		t.cancel(cause)
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

// Shutdown refuses new turns, cancels in-flight ones (waiting for them
// until ctx ends), then releases the warm sessions and waits for their
// teardowns, each bounded by the teardown timeout.
func (s *Service) Shutdown(ctx context.Context) error {
	turns := s.stopTaking(&s.closing)
	for _, t := range turns {
		t.cancel(errShutdown)
	}
	for _, t := range turns {
		t.waitDone(ctx)
	}
	// The warm sessions' teardowns write to the store: the caller closes
	// it once Shutdown returns, so they are waited for even past ctx (each
	// is bounded by the teardown timeout), the pools side by side.
	var wg sync.WaitGroup
	for _, p := range s.pools {
		wg.Go(p.Close)
	}
	wg.Wait()
	s.closeObservers(ctx)
	return ctx.Err()
}

// InFlight is the number of running turns.
func (s *Service) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// Warm is the number of warm sessions.
func (s *Service) Warm() int {
	n := 0
	for _, p := range s.pools {
		n += p.Len()
	}
	return n
}

// evict releases the session's warm harness, whichever provider holds it.
func (s *Service) evict(k store.SessionKey, reason string) {
	for _, p := range s.pools {
		p.Evict(poolKey(k), reason)
	}
}

// warmKey reports whether the session is parked in any pool.
func (s *Service) warmKey(k store.SessionKey) bool {
	for _, p := range s.pools {
		if p.Has(poolKey(k)) {
			return true
		}
	}
	return false
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
