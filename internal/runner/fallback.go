package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// A sandbox can vanish under a warm session: Daytona auto-deletes it, an
// operator deletes it, it is stopped out of band. The runner notices in
// three places: a probe before a warm session that sat idle is reused, the
// daemon client's Gone check when its requests start failing (an error
// wrapping sandbox.ErrGone), and the stream heartbeats that make a dead
// connection fail within seconds. When the sandbox is gone before the
// prompt reached the harness, the turn moves to a fresh sandbox with the
// history replayed and succeeds; when the harness had already answered,
// the turn fails at once with an error naming the lost sandbox.

// DefaultWarmProbeIdle is the idle time after which a warm session's
// sandbox is probed before reuse: a session reused at once (a tool loop,
// an eager caller) is not slowed by a probe.
const DefaultWarmProbeIdle = 3 * time.Second

// probeTimeout bounds the probe of a warm session's sandbox.
const probeTimeout = 5 * time.Second

// reasonSandboxGone releases a warm session whose sandbox vanished; it is
// not parkable, so the release deletes (a gone sandbox's delete is a 404,
// which counts as done).
const reasonSandboxGone = "sandbox-gone"

// probed returns lv when its sandbox still answers, probing it when the
// session sat idle longer than WarmProbeIdle; a sandbox that is gone is
// released and the turn runs cold (nil).
func (t *turn) probed(lv *live, e *pool.Entry) *live {
	idle := t.svc.cfg.WarmProbeIdle
	if idle == 0 {
		idle = DefaultWarmProbeIdle
	}
	pr, ok := lv.sb.(sandbox.Prober)
	if !ok || idle < 0 || time.Since(lv.parkedAt) < idle {
		return lv
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	err := pr.Probe(ctx)
	cancel()
	if err == nil {
		return lv
	}
	id := lv.sb.Info().ID
	t.log.Info("warm session's sandbox is gone; running cold", logkey.Sandbox, id, logkey.Error, err)
	t.record(wire.DataEvent("agent-session.teardown", map[string]string{"reason": reasonSandboxGone, "why": err.Error()}, false), true)
	rctx, rcancel := context.WithTimeout(context.Background(), t.svc.cfg.TeardownTimeout)
	defer rcancel()
	e.Release(rctx, reasonSandboxGone)
	return nil
}

// fallback handles a turn whose sandbox was lost. When the harness sent
// nothing this turn, the prompt is taken as never delivered (an
// approximation: a prompt that reached a harness which died before its
// first event counts as undelivered too, and the sandbox it might have
// changed is gone anyway): lv is released and fallback reports true, so
// the turn runs once more on a fresh sandbox with the history replayed.
// Otherwise *err is made to name the lost sandbox and the turn fails.
func (t *turn) fallback(ctx context.Context, lv *live, err *error) bool {
	if *err == nil || lv == nil || !errors.Is(*err, sandbox.ErrGone) || ctx.Err() != nil {
		return false
	}
	id := lv.sb.Info().ID
	if t.fellBack || t.heard.Load() > 0 || lv.awaiting {
		*err = fmt.Errorf("the turn's sandbox %s was lost mid-turn; send the message again to continue in a new sandbox: %w", id, *err)
		return false
	}
	t.log.Info("sandbox lost before the prompt was delivered; moving the turn to a fresh sandbox", logkey.Sandbox, id, logkey.Error, *err)
	t.emit(wire.DataEvent("agent-session.fallback", map[string]string{"reason": reasonSandboxGone, "lostSandbox": id}, false))
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.svc.cfg.TeardownTimeout)
	lv.release(rctx, reasonSandboxGone)
	cancel()
	t.lv, t.fellBack = nil, true
	return true
}
