package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/gateway"
	builtin "github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace"
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

func (pw *prewarm) kick() {
	select {
	case pw.wake <- struct{}{}:
	default:
	}
}

// run starts slots while a shape is short of its count, within the
// memory budget and the refill bound, until close.
func (pw *prewarm) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := pw.startDue()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-pw.ctx.Done():
			return
		case <-pw.wake:
		case <-timer.C:
		}
	}
}

// startDue starts what may start now and returns when a shape waiting
// out a failure may be retried (zero: none waits).
func (pw *prewarm) startDue() (retry time.Time) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.closed {
		return time.Time{}
	}
	now := time.Now()
	for {
		var pick *shapePool
		busy, held := 0, 0
		for _, sp := range pw.shapes {
			busy += sp.starting
			held += sp.starting + len(sp.ready)
		}
		if busy >= pw.cfg.Refills || !pw.fits(held+1) {
			return retry
		}
		for _, sp := range pw.shapes {
			if len(sp.ready)+sp.starting >= sp.shape.Slots {
				continue
			}
			if now.Before(sp.retryAt) {
				if retry.IsZero() || sp.retryAt.Before(retry) {
					retry = sp.retryAt
				}
				continue
			}
			// The shape furthest below its count first.
			if pick == nil || len(sp.ready)+sp.starting-sp.shape.Slots < len(pick.ready)+pick.starting-pick.shape.Slots {
				pick = sp
			}
		}
		if pick == nil {
			return retry
		}
		pick.starting++
		pw.fills.Go(func() { pw.fill(pick) })
	}
}

// fits reports whether n slots stay within the memory budget.
func (pw *prewarm) fits(n int) bool {
	return pw.cfg.MemoryBudget <= 0 || pw.cfg.SlotMemory <= 0 || int64(n)*pw.cfg.SlotMemory <= pw.cfg.MemoryBudget
}

// fill starts one slot of sp.
func (pw *prewarm) fill(sp *shapePool) {
	start := time.Now()
	sl, err := pw.svc.startSlot(pw.ctx, sp)
	pw.mu.Lock()
	sp.starting--
	keep := err == nil && !pw.closed
	if keep {
		sp.ready = append(sp.ready, sl)
		sp.lastErr = ""
	} else if err != nil && pw.ctx.Err() == nil {
		sp.retryAt = time.Now().Add(pw.cfg.RetryAfter)
		sp.lastErr = err.Error()
	}
	pw.mu.Unlock()
	switch {
	case err != nil && pw.ctx.Err() == nil:
		pw.log.Warn("pre-warmed slot failed to start; retrying later", logkey.Harness, sp.shape.Harness, logkey.Provider, sp.shape.Provider, logkey.Error, err)
	case err == nil && !keep: // closed while it started
		pw.destroy(sl)
	case err == nil:
		pw.log.Debug("pre-warmed slot ready", logkey.Harness, sp.shape.Harness, logkey.Sandbox, sl.lv.sb.Info().ID, logkey.Duration, time.Since(start).Milliseconds())
	}
	pw.kick()
}

// destroy tears a slot down, under a context of its own.
func (pw *prewarm) destroy(sl *slot) {
	ctx, cancel := context.WithTimeout(context.Background(), pw.svc.cfg.TeardownTimeout)
	defer cancel()
	sl.lv.release(ctx, reasonPrewarm)
}

// reasonPrewarm is the teardown reason of a slot: never parkable, so its
// sandbox is destroyed, not paused for anyone.
const reasonPrewarm = "prewarm-slot"

// close stops the refills, waits for those in flight and destroys the
// ready slots. Claimed slots belong to their sessions.
func (pw *prewarm) close() {
	pw.mu.Lock()
	pw.closed = true
	pw.mu.Unlock()
	pw.cancel()
	pw.loop.Wait()
	pw.fills.Wait()
	pw.mu.Lock()
	var ready []*slot
	for _, sp := range pw.shapes {
		ready = append(ready, sp.ready...)
		sp.ready = nil
	}
	pw.mu.Unlock()
	var wg sync.WaitGroup
	for _, sl := range ready {
		wg.Go(func() { pw.destroy(sl) })
	}
	wg.Wait()
}

// startSlot sets a slot of sp up: the cold stages over the shape's
// template request, with a key gateway reservation for its route and an
// empty tool relay binding.
func (s *Service) startSlot(ctx context.Context, sp *shapePool) (*slot, error) {
	h := s.harnesses[sp.shape.Harness]
	env, err := materialize(sp.template.ModelConnection)
	if err != nil {
		return nil, fmt.Errorf("prewarm template: %w", err)
	}
	p := &plan{req: sp.template, harness: h, provider: sp.shape.Provider, env: env}
	t := &turn{svc: s, plan: p, index: -1, log: s.log.With(logkey.Harness, h.spec.Name)}
	lv := &live{harness: h.spec.Name, provider: p.provider}
	c := &coldStart{t: t, lv: lv, prov: s.providers[p.provider]}
	sl := &slot{lv: lv}
	if g := s.cfg.Gateway; g != nil {
		sl.res = g.Reserve()
		c.register = func(spec gateway.Spec) (gateway.Route, error) { return sl.res.Unbound(spec), nil }
	}
	stages := []stage{
		{"route", c.route},
		{"sandbox", c.sandbox},
		{"configure", c.configureHarness},
		{"binding", c.slotBinding},
		{"session", c.session},
	}
	if err := lv.setUp(ctx, t.log, s.cfg.TeardownTimeout, stages); err != nil {
		if s.cfg.Gateway != nil && lv.route == nil {
			sl.res.Release() // no route stage undo holds it
		}
		return nil, err
	}
	sl.print = launchPrint(sl, lv.sb.Info(), c.launchEnv(lv.sb.Info(), lv.env, c.hc), c.hc)
	sl.mode = c.hc.Mode
	return sl, nil
}

// slotBinding gives the slot an empty binding on the tool relay when its
// harness takes MCP servers, so a claim can bind the turn's tools behind
// the server entry session/new fixed.
func (c *coldStart) slotBinding(context.Context) (undo, error) {
	s := c.t.svc
	if s.cfg.Tools.Relay == nil || len(s.cfg.Tools.Shim) == 0 || c.t.plan.harness.spec.NoMCP {
		return nil, nil
	}
	b := s.cfg.Tools.Relay.Bind(nil, c.t.log)
	c.lv.binding = b
	return func(context.Context, string) { b.Close() }, nil
}

// launchPrint is the fingerprint of what a harness starts with, less the
// model (bound over ACP at claim): its command, environment and files,
// with the slot's own names (its sandbox's directories, its reservation)
// written as such, so that every slot of a shape has the same print and
// a claim can be checked before a slot is taken.
func launchPrint(sl *slot, info sandbox.Info, env []string, hc HarnessConfig) string {
	pairs := []string{}
	if sl.res.BaseURL != "" {
		pairs = append(pairs, sl.res.BaseURL, "$GATEWAY", sl.res.Placeholder, "$KEY")
	}
	pairs = append(pairs, info.Home, "$HOME", info.Workdir, "$WORKDIR", info.ID, "$SANDBOX")
	r := strings.NewReplacer(pairs...)
	norm := make([]string, len(env))
	for i, kv := range env {
		norm[i] = r.Replace(kv)
	}
	files := map[string]string{}
	for n, f := range hc.Files {
		files[n] = fmt.Sprintf("%o:%s", f.Mode, r.Replace(string(f.Content)))
	}
	cmd := make([]string, len(hc.Command))
	for i, a := range hc.Command {
		cmd[i] = r.Replace(a)
	}
	return hash(struct {
		Command []string
		Env     []string
		Files   map[string]string
	}{cmd, norm, files})
}

// launchEnv is the harness's environment as the session stage builds it.
func (c *coldStart) launchEnv(info sandbox.Info, model map[string]string, hc HarnessConfig) []string {
	env := c.env(info, model)
	for _, k := range slices.Sorted(maps.Keys(hc.Env)) {
		env = append(env, k+"="+hc.Env[k])
	}
	return env
}

// prewarmed takes a ready slot for the turn's new harness and binds it to
// the turn, or returns nil and the turn goes cold; a miss is counted
// with its reason.
func (t *turn) prewarmed(ctx context.Context) *live {
	pw := t.svc.prewarm
	if pw == nil {
		return nil
	}
	sp := pw.shapeOf(t.plan)
	if sp == nil {
		return nil // no slots of this harness and provider: not a miss
	}
	if reason := t.unprewarmable(); reason != "" {
		pw.miss(sp, reason)
		t.prewarmMiss = reason
		return nil
	}
	if peek := pw.peek(sp); peek != nil {
		if err := t.fits(ctx, peek); err != nil {
			t.log.Info("pre-warmed slots do not fit the request; running cold", logkey.Reason, MissConfig, logkey.Error, err)
			pw.miss(sp, MissConfig)
			t.prewarmMiss = MissConfig
			return nil
		}
	}
	sl := pw.take(sp)
	if sl == nil {
		pw.miss(sp, MissEmpty)
		t.prewarmMiss = MissEmpty
		return nil
	}
	reason, err := t.bindSlot(ctx, sl)
	if reason != "" {
		t.log.Warn("pre-warmed slot failed to bind; destroyed, running cold", logkey.Reason, reason, logkey.Error, err)
		pw.destroy(sl) // claimed: it never goes back
		pw.unclaim(sp)
		pw.miss(sp, reason)
		t.prewarmMiss = reason
		return nil
	}
	pw.hit(sp)
	lv := sl.lv
	lv.undos = append(lv.undos, func(context.Context, string) { pw.unclaim(sp) })
	return lv
}

// peek is sp's oldest ready slot, left in place.
func (pw *prewarm) peek(sp *shapePool) *slot {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if len(sp.ready) == 0 {
		return nil
	}
	return sp.ready[0]
}

// fits checks that sl's harness started with what a cold start for the
// turn's request would have given it, the model aside: the same command,
// environment and files (launchPrint). It binds nothing.
func (t *turn) fits(ctx context.Context, sl *slot) error {
	s, p, lv := t.svc, t.plan, sl.lv
	info := lv.sb.Info()
	probe := *p.req
	probe.Model = prewarmModel
	pc := &coldStart{t: &turn{svc: s, plan: withRequest(p, &probe), log: t.log}, lv: lv}
	if s.cfg.Gateway != nil {
		pc.register = func(spec gateway.Spec) (gateway.Route, error) { return sl.res.Unbound(spec), nil }
	}
	penv, preq, _, err := pc.hideKeys()
	if err != nil {
		return err
	}
	phc, err := pc.harnessConfig(ctx, info, preq, penv)
	if err != nil {
		return err
	}
	if launchPrint(sl, info, pc.launchEnv(info, penv, phc), phc) != sl.print {
		return errors.New("the harness would start with another command, environment or files for this request")
	}
	return nil
}

func (pw *prewarm) shapeOf(p *plan) *shapePool {
	for _, sp := range pw.shapes {
		if sp.shape.Harness == p.harness.spec.Name && sp.shape.Provider == p.provider {
			return sp
		}
	}
	return nil
}

// take removes a ready slot of sp, oldest first, and wakes the refills.
func (pw *prewarm) take(sp *shapePool) *slot {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if len(sp.ready) == 0 {
		return nil
	}
	sl := sp.ready[0]
	sp.ready = slices.Delete(sp.ready, 0, 1)
	sp.claimed++
	pw.kick()
	return sl
}

func (pw *prewarm) unclaim(sp *shapePool) {
	pw.mu.Lock()
	sp.claimed--
	pw.mu.Unlock()
}

func (pw *prewarm) miss(sp *shapePool, reason string) {
	pw.mu.Lock()
	sp.misses[reason]++
	pw.mu.Unlock()
}

func (pw *prewarm) hit(sp *shapePool) {
	pw.mu.Lock()
	sp.hits++
	pw.mu.Unlock()
}

// unprewarmable says why the turn's request cannot be bound to a slot
// without looking at one: what the slots were not started with.
func (t *turn) unprewarmable() string {
	s, p := t.svc, t.plan
	switch {
	case p.network != "" && p.network != "on", len(p.allow) > 0:
		return MissNetwork
	case p.req.SandboxPermission != nil && p.req.SandboxPermission.Filesystem == "readonly":
		return MissReadOnly
	case len(p.req.MCPServers) > 0:
		return MissMCPServers
	case s.cfg.Gateway == nil || s.unhideable(p.req) || p.req.ModelConnection == nil || len(p.req.ModelConnection.Credentials) == 0:
		return MissCredentials
	case s.cfg.Mounter != nil && s.cfg.Workspaces != nil:
		return MissFuse
	case s.cfg.Workspaces != nil && workspace.AgentID(p.req) != "":
		return MissAgentFolder
	}
	return ""
}

// bindSlot binds the claimed slot to the turn: the turn's endpoint and
// key to the slot's reservation, after checking the harness started with
// what a cold start for this request would have given it; then its
// model and mode, its files and its durable workspace. A non-empty
// reason means the slot must be destroyed.
func (t *turn) bindSlot(ctx context.Context, sl *slot) (string, error) {
	s, p, lv := t.svc, t.plan, sl.lv
	info := lv.sb.Info()
	c := &coldStart{t: t, lv: lv, prov: s.providers[p.provider]}
	if err := t.fits(ctx, sl); err != nil {
		return MissConfig, err
	}
	// Bind: from here on the slot is the turn's. A harness the runner
	// configures was given the placeholder model in its own configuration
	// and names it in every model call: the gateway renames it to the
	// request's. Another harness is told the model over ACP.
	model := modelID(p.req)
	_, configured := builtin.Lookup(p.harness.spec.Name)
	c.register = func(spec gateway.Spec) (gateway.Route, error) {
		if configured && model != "" {
			spec.Models = map[string]string{prewarmModel: model}
		}
		return sl.res.Bind(spec)
	}
	env, req, rt, err := c.hideKeys()
	if err != nil {
		return MissBind, err
	}
	if rt != nil {
		lv.route = rt
	}
	lv.env, lv.req = env, req
	hc, err := c.harnessConfig(ctx, info, req, env)
	if err != nil {
		return MissBind, err
	}
	lv.diagnose = hc.Diagnose
	lv.configFP, lv.epoch = configFingerprint(p.req, p.provider), credentialEpoch(p.env, p.req)
	s.recordSandbox(info, t.key, store.SandboxRunning)
	rb, _ := lv.sess.(agent.Rebinder)
	if !configured && model != "" {
		if rb == nil {
			return MissBind, errors.New("the harness cannot change its model on an open session")
		}
		if err := rb.SetModel(ctx, model); err != nil {
			return MissBind, err
		}
	}
	if hc.Mode != "" && hc.Mode != sl.mode {
		if rb == nil {
			return MissBind, errors.New("the harness cannot change its mode on an open session")
		}
		if err := rb.SetMode(ctx, hc.Mode); err != nil {
			return MissBind, err
		}
	}
	if lv.binding != nil && t.tools != nil {
		// The harness listed the slot's empty tools when its session
		// opened; it is told of the turn's and lists them again, which
		// the first prompt must not overtake.
		lv.binding.Use(t.tools)
		lctx, cancel := context.WithTimeout(ctx, toolsListedWait)
		err := lv.binding.Listed(lctx)
		cancel()
		if err != nil {
			return MissBind, fmt.Errorf("the harness did not list the turn's tools within %s: %w", toolsListedWait, err)
		}
	}
	u, err := c.workspace(ctx)
	if u != nil {
		lv.undos = append(lv.undos, u)
	}
	if err != nil {
		return MissBind, err
	}
	if err := c.writeFiles(ctx, lv.sb); err != nil {
		return MissBind, err
	}
	return "", nil
}

// harnessConfig is the configurer's answer for req, written nowhere.
func (c *coldStart) harnessConfig(ctx context.Context, info sandbox.Info, req *wire.Request, env map[string]string) (HarnessConfig, error) {
	t := c.t
	if t.svc.cfg.Configure == nil {
		return HarnessConfig{}, nil
	}
	return t.svc.cfg.Configure(ctx, HarnessSetup{Harness: t.plan.harness.spec.Name, Provider: t.plan.provider, Request: req, Env: env, Home: info.Home})
}

// withRequest is p for another request.
func withRequest(p *plan, req *wire.Request) *plan {
	q := *p
	q.req = req
	return &q
}

// modelID is the request's model as the harness knows it: without the
// connection's own provider before a slash.
func modelID(r *wire.Request) string {
	if mc := r.ModelConnection; mc != nil {
		if pr, rest, ok := strings.Cut(r.Model, "/"); ok && strings.EqualFold(pr, mc.Provider) {
			return rest
		}
	}
	return r.Model
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
