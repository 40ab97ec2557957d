package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/gateway"
	builtin "github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace"
)

// The turn's side of pre-warmed slots (prewarm.go): the claim, the check
// that a slot was started as a cold start would have been, and the late
// binding of the request's key, model, tools and files.

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
