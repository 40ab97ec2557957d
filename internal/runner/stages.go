package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// A cold harness is set up in stages, one per resource it holds: the key
// gateway's route, the sandbox, the durable workspace (sync watches, the
// FUSE mount), the tool relay's binding, the sandbox's channels back to
// the runner, the in-sandbox model forward and the harness session. Each
// stage's setup returns its own undo; the live harness keeps them and,
// when it is released (a failed setup, a failed turn, the pool letting
// it go), one loop runs them last first.

// undo tears down what one stage set up. reason is why the harness goes
// (a pool.Reason…): the sandbox's undo pauses, rather than destroys, a
// sandbox whose reason lets it be parked.
type undo func(ctx context.Context, reason string)

// stage is one resource of a cold harness: setup returns its undo, nil
// when it set nothing up. A setup that fails part way returns the undo
// of what it did set up with its error.
type stage struct {
	name  string
	setup func(ctx context.Context) (undo, error)
}

// coldStart is one cold harness being set up: what its stages hand on
// to the later ones.
type coldStart struct {
	t    *turn
	lv   *live
	prov sandbox.Provider
	// reopened is set when the session's parked sandbox was reopened;
	// hc is the harness's own configuration for the session.
	reopened bool
	hc       HarnessConfig
	// register, if set, routes the model connection instead of the key
	// gateway's Register: a pre-warmed slot's reservation (prewarm.go).
	register func(gateway.Spec) (gateway.Route, error)
}

// cold creates a sandbox and opens a harness session in it: reloading the
// harness's own transcript when this harness wrote the session's latest
// completed turn and its state survived, a new session otherwise.
func (t *turn) cold(ctx context.Context) (*live, error) {
	p := t.plan
	lv := &live{harness: p.harness.spec.Name, provider: p.provider, configFP: configFingerprint(p.req, p.provider), epoch: credentialEpoch(p.env, p.req)}
	c := &coldStart{t: t, lv: lv, prov: t.svc.providers[p.provider]}
	stages := []stage{
		{"route", c.route},
		{"sandbox", c.sandbox},
		{"workspace", c.workspace},
		{"configure", c.configureHarness},
		{"binding", c.binding},
		{"channels", c.channels},
		{"forward", c.forward},
		{"session", c.session},
	}
	if err := lv.setUp(ctx, t.log, t.svc.cfg.TeardownTimeout, stages); err != nil {
		return nil, err
	}
	return lv, nil
}

// setUp runs stages in order, keeping each one's undo on lv. When one
// fails, what was set up is unwound, under a context of its own that the
// caller's cancel does not reach, bounded by teardown, and its error is
// returned.
func (lv *live) setUp(ctx context.Context, log *slog.Logger, teardown time.Duration, stages []stage) error {
	for _, st := range stages {
		u, err := st.setup(ctx)
		if u != nil {
			lv.undos = append(lv.undos, u)
		}
		if err != nil {
			log.Debug("cold setup failed", logkey.Stage, st.name, logkey.Error, err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardown)
			defer cancel()
			lv.release(rctx, pool.ReasonSetupFailed)
			return err
		}
	}
	return nil
}

// release undoes lv's stages, last first: it closes the harness and
// destroys (or, for a resumable reason on a provider that can, pauses)
// the sandbox.
func (lv *live) release(ctx context.Context, reason string) {
	for i := len(lv.undos) - 1; i >= 0; i-- {
		lv.undos[i](ctx, reason)
	}
	lv.undos = nil
}

// route hides the model connection's keys behind a key gateway route.
func (c *coldStart) route(context.Context) (undo, error) {
	lv := c.lv
	var err error
	if lv.env, lv.req, lv.route, err = c.hideKeys(); err != nil || lv.route == nil {
		return nil, err
	}
	rt := lv.route
	return func(context.Context, string) { rt.Release() }, nil
}

// sandbox reopens the session's parked sandbox or creates one.
func (c *coldStart) sandbox(ctx context.Context) (undo, error) {
	t, p, lv := c.t, c.t.plan, c.lv
	var runner []string
	if lv.route != nil && p.network != "off" {
		runner = []string{t.svc.cfg.Gateway.Addr()}
	}
	if t.key.SessionID != "" {
		if _, ok := c.prov.(sandbox.StateRemover); ok {
			lv.stateKey = poolKey(t.key)
		}
	}
	spec := sandbox.Spec{
		SessionID: t.key.SessionID,
		ProjectID: t.key.ProjectID,
		Network:   sandbox.Network{Mode: p.network, Allow: p.allow, Runner: runner},
		ReadOnly:  p.req.SandboxPermission != nil && p.req.SandboxPermission.Filesystem == "readonly",
		StateKey:  lv.stateKey,
		Labels:    map[string]string{"session": t.key.SessionID, "project": t.key.ProjectID, "replica": t.svc.cfg.ReplicaID},
		OnEvent: func(name string, data map[string]any) {
			if cur := lv.turn(); cur != nil {
				cur.emit(wire.DataEvent(name, data, false))
			}
		},
	}
	if b, ok := c.prov.(sandbox.Binder); ok && b.CanBind() {
		spec.Binds = append(t.svc.toolBinds(), t.svc.cfg.Binds...)
		spec.Workdir = t.svc.cfg.Workdir
	} else if t.svc.cfg.Workdir != "" {
		return nil, errdefs.Unprocessablef("a working directory of this machine (runner run -workdir) needs a sandbox provider that shares its filesystem; %s does not", p.provider)
	}
	start := time.Now()
	sb, reopened := c.reopen(ctx, c.prov, spec)
	if sb == nil {
		var err error
		if sb, err = c.prov.Create(ctx, spec); err != nil {
			return nil, fmt.Errorf("create %s sandbox: %w", p.provider, err)
		}
	}
	lv.sb, c.reopened = sb, reopened
	info := sb.Info()
	t.log.Debug("timing", logkey.Stage, "sandbox_start", logkey.Duration, time.Since(start).Milliseconds(), logkey.Sandbox, info.ID)
	t.svc.recordSandbox(info, t.key, store.SandboxRunning)
	s := t.svc
	return func(ctx context.Context, reason string) { s.releaseSandbox(ctx, sb, reason) }, nil
}

// releaseSandbox pauses sb when reason lets it be parked and its provider
// can, and destroys it otherwise.
func (s *Service) releaseSandbox(ctx context.Context, sb sandbox.Sandbox, reason string) {
	info := sb.Info()
	state := store.SandboxDestroyed
	if pz, ok := sb.(sandbox.Pauser); ok && pool.Parkable(reason) {
		if err := pz.Pause(ctx); err == nil {
			state = store.SandboxPaused
		} else if !errors.Is(err, errdefs.ErrNotFound) { // gone already: nothing failed
			s.log.Warn("pause sandbox failed; destroying it", logkey.Sandbox, info.ID, logkey.Error, err)
		}
	}
	if state == store.SandboxDestroyed {
		if err := sb.Destroy(ctx); err != nil {
			s.log.Warn("sandbox teardown failed", logkey.Sandbox, info.ID, logkey.Error, err)
			return
		}
	}
	s.log.Debug("sandbox released", logkey.Sandbox, info.ID, logkey.Reason, reason)
	s.recordSandbox(info, store.SessionKey{}, state)
}

// workspace restores (or mounts) the session's durable files.
func (c *coldStart) workspace(ctx context.Context) (undo, error) {
	return c.acquireWorkspace(ctx, c.lv) // durable.go
}

// configureHarness writes the instruction and harness files and the
// harness's own configuration into the sandbox; it holds nothing to undo.
func (c *coldStart) configureHarness(ctx context.Context) (undo, error) {
	if err := c.writeFiles(ctx, c.lv.sb); err != nil {
		return nil, err
	}
	var err error
	c.hc, err = c.configure(ctx, c.lv.sb, c.lv)
	c.lv.diagnose = c.hc.Diagnose
	return nil, err
}

// gatewayAuth is the ACP gateway authentication of a harness whose key
// goes through the key gateway, which drops what the harness's gateway
// mode adds (builtin.GatewayDrop); nil when the key is the harness's own.
func gatewayAuth(hc HarnessConfig, lv *live) *agent.GatewayAuth {
	if hc.Gateway == nil || lv.route == nil {
		return nil
	}
	return hc.Gateway
}

// binding binds the turn's tools on the tool relay.
func (c *coldStart) binding(context.Context) (undo, error) {
	t := c.t
	if t.tools == nil {
		return nil, nil
	}
	b := t.svc.cfg.Tools.Relay.Bind(t.tools, t.log)
	c.lv.binding = b
	return func(context.Context, string) { b.Close() }, nil
}

// channels serves the streams a remote sandbox opens back to the runner:
// the tool relay's, and the key gateway's when the sandbox does not
// share the runner's host.
func (c *coldStart) channels(context.Context) (undo, error) {
	t, lv := c.t, c.lv
	var u undo
	stop := func(context.Context, string) {
		if lv.channel != nil {
			lv.channel.stop()
		}
	}
	if lv.binding != nil {
		if ch, ok := lv.sb.(sandbox.Channeler); ok {
			lv.serveTools(t.svc, ch)
			u = stop
		}
	}
	if lv.route != nil && !t.svc.sharesHost(lv.provider) {
		ch, ok := lv.sb.(sandbox.Channeler)
		if !ok {
			return u, errdefs.Unprocessablef("provider %s cannot reach the runner's key gateway; set AGENTA_RUNNER_KEY_GATEWAY=off to pass keys into its sandboxes", lv.provider)
		}
		lv.serveModel(t.svc, ch)
		u = stop
	}
	return u, nil
}

// forward starts the in-sandbox end of the model channel (remote.go).
func (c *coldStart) forward(ctx context.Context) (undo, error) {
	t, lv := c.t, c.lv
	if lv.route == nil || t.svc.sharesHost(lv.provider) {
		return nil, nil
	}
	if err := c.startModelForward(ctx, lv, lv.sb.(sandbox.Channeler)); err != nil {
		return nil, err
	}
	fw := lv.forward
	return func(context.Context, string) { _ = fw.Kill() }, nil
}

// session opens the harness session: reloading the harness's own
// transcript when it survived, a new session otherwise.
func (c *coldStart) session(ctx context.Context) (undo, error) {
	t, p, lv, hc := c.t, c.t.plan, c.lv, c.hc
	info := lv.sb.Info()
	hspec := p.harness.spec
	if len(hc.Command) > 0 {
		hspec.Command = hc.Command
	}
	env := c.env(info, lv.env)
	for _, k := range slices.Sorted(maps.Keys(hc.Env)) {
		env = append(env, k+"="+hc.Env[k])
	}
	env = append(env, lv.workspaceEnv()...)
	load := ""
	if lv.stateKey != "" || c.reopened || lv.transcriptRestored() {
		// The harness's own transcript survived: in the durable state dir,
		// or in the sandbox itself.
		load = t.svc.loadable(ctx, t.key, p.harness.spec.Name)
	}
	start := time.Now()
	sess, err := t.svc.driver.Open(ctx, lv.sb, agent.Options{
		Spec:          hspec,
		Env:           env,
		Mode:          hc.Mode,
		Cwd:           info.Workdir,
		MCPServers:    c.mcpServers(lv),
		LoadSessionID: load,
		Permission: func(ctx context.Context, req agent.PermissionRequest) agent.Decision {
			if cur := lv.turn(); cur != nil {
				return cur.permission(ctx, req)
			}
			return agent.Decision{Allow: false, Reason: "between turns"}
		},
		Logger:  t.log.With(logkey.Sandbox, info.ID),
		Gateway: gatewayAuth(hc, lv),
	})
	if err != nil {
		return nil, err
	}
	lv.sess = sess
	t.log.Debug("timing", logkey.Stage, "create_session", logkey.Duration, time.Since(start).Milliseconds(), "loaded", sess.Info().Loaded)
	return func(ctx context.Context, _ string) { _ = sess.Close(ctx) }, nil
}
