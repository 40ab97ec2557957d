package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/gateway"
	builtin "github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/wire"
)

// A pre-warmed slot is a sandbox with its harness started, initialized
// and its session opened before any tenant asked for it, so a new
// session's first turn skips the harness boot. Nothing of a tenant is in
// it until a turn claims it (DESIGN principle 11, late binding): its
// model key is a key gateway reservation that reaches nothing, its model
// a placeholder, its tools an empty relay binding, its working directory
// empty. The claim binds the turn's endpoint and key to the reservation,
// its model and mode over ACP, its tools on the binding, and restores its
// files; whatever the harness took at start (its environment, command,
// config files) must be exactly what a cold start for the request would
// have given it, or the claim is refused and the turn goes cold, counted
// with its reason. A slot serves one session: it is never returned.

// PrewarmShape is one kind of slot: what cannot change once a harness
// started (the harness, the sandbox provider and with it the isolation,
// limits and uid the provider applies to all its sandboxes, the network
// mode), and how many slots of it to keep ready.
type PrewarmShape struct {
	Harness  string
	Provider string // "" is the default provider
	Slots    int
}

// PrewarmConfig is the pre-warm pool.
type PrewarmConfig struct {
	Shapes []PrewarmShape
	// MemoryBudget bounds the slots kept ready or being started, each
	// counted at SlotMemory bytes; 0 bounds nothing.
	MemoryBudget int64
	SlotMemory   int64
	// Refills bounds the slots started at once (default 1): a refill
	// competes with the turns for the machine.
	Refills int
	// RetryAfter is the pause after a slot failed to start (default 5 s).
	RetryAfter time.Duration
}

// Why a turn that could have used a slot ran cold: a closed list, the
// labels of the miss counter.
const (
	MissEmpty       = "empty"        // no ready slot
	MissNetwork     = "network"      // a network mode or allowlist the slot was not started with
	MissReadOnly    = "readonly"     // a read-only filesystem
	MissMCPServers  = "mcp-servers"  // the request's own MCP servers, fixed at session/new
	MissCredentials = "credentials"  // keys the key gateway cannot carry, or none to bind
	MissAgentFolder = "agent-folder" // a durable agent folder, named in the harness's environment
	MissFuse        = "fuse"         // a FUSE-mounted workspace, mounted before the harness starts
	MissConfig      = "config"       // the harness would have started with another environment or files
	MissBind        = "bind-failed"  // binding the claimed slot failed; it was destroyed
)

// prewarmKey is a template request's placeholder key: what the slot's
// configuration is computed from before a tenant exists. It never leaves
// the runner: the harness gets the reservation's placeholder for it.
const prewarmKey = "runner-prewarm-template-key"

// toolsListedWait bounds the wait for a claimed slot's harness to list
// the turn's tools (it is generous: a loaded machine slows the harness).
const toolsListedWait = 10 * time.Second

// prewarmModel is the model a slot's harness is configured with until a
// claim sets the turn's over ACP.
const prewarmModel = "runner-prewarm-model"

// prewarm is the Service's pool of pre-warmed slots: one refill loop
// that starts slots in goroutines it owns, and the ready slots by shape.
type prewarm struct {
	svc    *Service
	cfg    PrewarmConfig
	log    *slog.Logger
	ctx    context.Context // cancelled by close: refills stop
	cancel context.CancelFunc
	wake   chan struct{}
	loop   sync.WaitGroup // the refill loop
	fills  sync.WaitGroup // the slots being started

	// mu guards the following.
	mu      sync.Mutex
	shapes  []*shapePool
	started bool
	closed  bool
}

// shapePool is one shape's slots and counters.
type shapePool struct {
	shape    PrewarmShape
	template *wire.Request
	ready    []*slot
	starting int
	claimed  int // claimed slots whose session still holds them
	hits     int64
	misses   map[string]int64
	// retryAt is when a failed start may be retried.
	retryAt time.Time
	lastErr string
}

// slot is one pre-warmed harness and what it was started from.
type slot struct {
	lv  *live
	res gateway.Reservation
	// print is the fingerprint of what the harness started with (its
	// command, environment and config files), computed from the shape's
	// template request: a claim computes the same from its own request.
	print string
	mode  string // the ACP mode it was opened in
}

// newPrewarm checks cfg's shapes against the launch table and providers
// and returns their pool, not started (StartPrewarm), or nil when there
// are none.
func newPrewarm(s *Service, cfg PrewarmConfig) (*prewarm, error) {
	if len(cfg.Shapes) == 0 {
		return nil, nil
	}
	if cfg.Refills <= 0 {
		cfg.Refills = 1
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 5 * time.Second
	}
	pw := &prewarm{svc: s, cfg: cfg, log: s.log, wake: make(chan struct{}, 1)}
	for _, sh := range cfg.Shapes {
		if sh.Provider == "" {
			sh.Provider = s.cfg.DefaultProvider
		}
		h, ok := s.harnesses[sh.Harness]
		if !ok {
			return nil, fmt.Errorf("AGENTA_RUNNER_PREWARM: harness %q is not configured (configured: %s)", sh.Harness, strings.Join(s.harnessNames(), ", "))
		}
		if _, ok := s.providers[sh.Provider]; !ok {
			return nil, fmt.Errorf("AGENTA_RUNNER_PREWARM: provider %q of harness %s is not enabled", sh.Provider, sh.Harness)
		}
		if !s.sharesHost(sh.Provider) {
			// A remote slot would bill while it waits, and reach the key
			// gateway only through a channel set up per session.
			return nil, fmt.Errorf("AGENTA_RUNNER_PREWARM: provider %s cannot keep pre-warmed slots (only providers whose sandboxes share the runner's host: local)", sh.Provider)
		}
		if s.cfg.Workdir != "" {
			return nil, errors.New("AGENTA_RUNNER_PREWARM: a runner with one working directory (runner run -workdir) has no slots to pre-warm")
		}
		pw.shapes = append(pw.shapes, &shapePool{shape: sh, template: prewarmTemplate(h.spec, sh), misses: map[string]int64{}})
	}
	pw.ctx, pw.cancel = context.WithCancel(context.Background())
	return pw, nil
}

// StartPrewarm starts filling the pre-warmed slots (AGENTA_RUNNER_PREWARM),
// in the background until Shutdown; call it once, after Recover (which
// would take the new slots' sandboxes for ones a previous process left).
// Without shapes it does nothing.
func (s *Service) StartPrewarm() {
	pw := s.prewarm
	if pw == nil {
		return
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.closed || pw.started {
		return
	}
	pw.started = true
	pw.loop.Go(pw.run)
	pw.kick()
}

// prewarmTemplate is the request a shape's slots are configured from: a
// model connection of the harness's first provider API through a
// placeholder endpoint and key, with the variables a cold start of a
// request with that provider's conventional names would set.
func prewarmTemplate(spec agent.Spec, sh PrewarmShape) *wire.Request {
	api := builtin.OpenAIChat
	if h, ok := builtin.Lookup(spec.Name); ok && len(h.APIs) > 0 {
		api = h.APIs[0]
	}
	provider, keyVar, urlVar, path := "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"
	switch api {
	case builtin.Anthropic:
		provider, keyVar, urlVar, path = "anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ""
	case builtin.Gemini:
		provider, keyVar, urlVar, path = "gemini", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", ""
	}
	endpoint := "https://prewarm.invalid" + path
	mc := &wire.ModelConnection{
		Provider: provider, Deployment: "direct", Endpoint: &wire.Endpoint{BaseURL: endpoint},
		Credentials: []wire.Credential{{Binding: wire.Binding{Kind: "environment", Name: keyVar}, Value: prewarmKey, Usage: "opaque_http"}},
	}
	if _, ok := builtin.Lookup(spec.Name); !ok {
		// A harness the runner has no configuration for reads the
		// connection's own variables: the base URL's too.
		mc.Environment = map[string]string{urlVar: endpoint}
	}
	return &wire.Request{Harness: sh.Harness, Sandbox: sh.Provider, Model: prewarmModel, ModelConnection: mc}
}

// Start says how a turn found its harness, on the agent-session event
// when pre-warming is on: "prewarmed", "warm" or "cold".
const (
	startPrewarmed = "prewarmed"
	startWarm      = "warm"
	startCold      = "cold"
)

// sessionEvent is the agent-session event; with pre-warming on it also
// says how the turn started and, for a turn that could have used a slot
// and ran cold, why (prewarmMiss). Without it the event is unchanged.
func (t *turn) sessionEvent(how acquired, lv *live) wire.Event {
	if t.svc.prewarm == nil {
		return agentSessionEvent(how, lv)
	}
	start := startCold
	switch {
	case t.obs.prewarmed:
		start = startPrewarmed
	case t.obs.warm:
		start = startWarm
	}
	data := map[string]string{"mode": how.String(), "agentSessionId": lv.sess.ID(), "sandbox": lv.sb.Info().ID, "start": start}
	if t.prewarmMiss != "" && start == startCold {
		data["prewarmMiss"] = t.prewarmMiss
	}
	return wire.DataEvent("agent-session", data, false)
}

// PrewarmStats is one shape's slots, for /health and metrics.
type PrewarmStats struct {
	Harness, Provider string
	Slots             int // the count it keeps ready
	Ready             int
	Claimed           int // claimed slots whose session still holds them
	Refilling         int // being started
	Hits              int64
	Misses            map[string]int64 // by reason (Miss…)
	LastError         string           // of the last failed start, until one succeeds
}

// Prewarm describes the pre-warm pool's shapes; nil when it is off.
func (s *Service) Prewarm() []PrewarmStats {
	pw := s.prewarm
	if pw == nil {
		return nil
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	out := make([]PrewarmStats, 0, len(pw.shapes))
	for _, sp := range pw.shapes {
		out = append(out, PrewarmStats{
			Harness: sp.shape.Harness, Provider: sp.shape.Provider, Slots: sp.shape.Slots,
			Ready: len(sp.ready), Claimed: sp.claimed, Refilling: sp.starting,
			Hits: sp.hits, Misses: maps.Clone(sp.misses), LastError: sp.lastErr,
		})
	}
	return out
}

var _ metrics.PrewarmState = (*Service)(nil)

// PrewarmShapes implements metrics.PrewarmState.
func (s *Service) PrewarmShapes() []metrics.PrewarmShape {
	var out []metrics.PrewarmShape
	for _, st := range s.Prewarm() {
		out = append(out, metrics.PrewarmShape{Harness: st.Harness, Provider: st.Provider, Ready: st.Ready, Claimed: st.Claimed,
			Refilling: st.Refilling, Hits: st.Hits, Misses: st.Misses})
	}
	return out
}
