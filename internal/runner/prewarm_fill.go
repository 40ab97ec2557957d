package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

// The pool's side of pre-warmed slots (prewarm.go): the refill loop that
// starts slots within the memory budget, a slot's start and its teardown.

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
