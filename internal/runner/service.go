package runner

import (
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
	"github.com/agentrunner/runner/internal/eventlog"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

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
	prewarm   *prewarm    // pre-warmed slots, nil when off (prewarm.go)
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
	// disk, or the whole request when no record keeps it.
	paused map[store.SessionKey]pausedTurn
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
		inflight: map[*turn]struct{}{}, busy: map[store.SessionKey]*turn{}, paused: map[store.SessionKey]pausedTurn{}, held: map[store.SessionKey]heldSession{},
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
	var err error
	if s.prewarm, err = newPrewarm(s, cfg.Prewarm); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Service) harnessNames() []string { return slices.Sorted(maps.Keys(s.harnesses)) }

func (s *Service) providerNames() []string { return slices.Sorted(maps.Keys(s.providers)) }

func projectOf(r *wire.Request) string {
	if r.RunContext != nil && r.RunContext.Project != nil && r.RunContext.Project.ID != "" {
		return r.RunContext.Project.ID
	}
	return r.ProjectID
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
