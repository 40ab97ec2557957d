package runner

import (
	"context"
	"crypto/subtle"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/wire"
)

// warm takes the session's warm harness from the pool if it can continue
// this turn: same configuration, same conversation, same credentials, and
// a plain user message. Otherwise the warm harness is released with the
// reason, and the turn runs cold.
func (t *turn) warm() *live {
	pl := t.svc.pools[t.plan.provider]
	if pl == nil {
		t.svc.evict(t.key, pool.ReasonRuntimeChanged) // parked under another provider
		return nil
	}
	e, ok := pl.Checkout(poolKey(t.key))
	if !ok {
		t.svc.evict(t.key, pool.ReasonRuntimeChanged)
		return nil
	}
	lv := e.Value.(*live)
	lv.awaiting = e.Awaiting()
	reason, why := lv.mismatch(t.plan)
	if reason == "" && lv.generation != t.generation {
		reason, why = pool.ReasonContinuityInvalid, "served-elsewhere"
	}
	if reason == "" {
		return t.probed(lv, e) // fallback.go
	}
	t.log.Info("warm session not reusable", logkey.Reason, reason, "why", why)
	t.record(wire.DataEvent("agent-session.teardown", map[string]string{"reason": reason, "why": why}, false), true)
	ctx, cancel := context.WithTimeout(context.Background(), t.svc.cfg.TeardownTimeout)
	defer cancel()
	e.Release(ctx, reason)
	return nil
}

func (lv *live) mismatch(p *plan) (reason, why string) {
	if lv.awaiting {
		// A paused turn resumes on its own configuration; the callback
		// bearer and the like may have changed (docs/contract.md, Sessions).
		switch {
		case lv.harness != p.harness.spec.Name || lv.provider != p.provider:
			return pool.ReasonRuntimeChanged, "harness or provider changed"
		case subtle.ConstantTimeCompare([]byte(lv.epoch), []byte(credentialEpoch(p.env, p.req))) != 1:
			return pool.ReasonRuntimeChanged, "credentials-rotated"
		case len(p.approvals) == 0:
			return pool.ReasonSessionIncompat, "no-parked-gate"
		}
		return "", ""
	}
	switch {
	case p.approvalOnly:
		return pool.ReasonContinuityInvalid, "tail"
	case lv.harness != p.harness.spec.Name || lv.provider != p.provider:
		return pool.ReasonRuntimeChanged, "harness or provider changed"
	case lv.configFP != configFingerprint(p.req, p.provider):
		return pool.ReasonRuntimeChanged, "config"
	case len(p.history) > 0 && lv.historyFP != historyFingerprint(p.history):
		return pool.ReasonContinuityInvalid, "history"
	case subtle.ConstantTimeCompare([]byte(lv.epoch), []byte(credentialEpoch(p.env, p.req))) != 1:
		return pool.ReasonRuntimeChanged, "credentials-rotated"
	case len(p.tail) == 0:
		return pool.ReasonContinuityInvalid, "tail"
	}
	return "", ""
}
