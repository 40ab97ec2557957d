package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// settle ends the turn: the ledger and event log are written before the
// result is returned, then the harness is parked warm or released.
func (t *turn) settle(lv *live, out agent.Outcome, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.svc.cfg.TeardownTimeout)
	defer cancel()
	status := settledStatus(out, err)
	if t.key.SessionID != "" {
		// Before the result: a paused turn is resumable once it says so.
		t.svc.rememberPause(ctx, t.log, t.key, t.plan, status == store.TurnPaused)
	}
	t.emitEnd(out, err, status)
	outcome := t.outcome(ctx, lv, out, err, status)
	stop := out.StopReason
	if err != nil && stop != agent.StopCancelled {
		stop = "error"
	}
	err = t.commitDone(wire.Event{Type: wire.EventDone, StopReason: stop, TraceID: t.traceID()}, outcome, err)
	if t.observers != nil {
		end := platform.TurnEnd{StopReason: stop, Usage: out.Usage, Err: err, Model: t.plan.req.Model}
		if lv != nil {
			end.SandboxID = lv.sb.Info().ID
			if lv.sess != nil {
				end.AgentSessionID = lv.sess.ID()
			}
		}
		t.observeEnd(end)
	}
	if t.tools != nil {
		t.tools.Close()
	}
	if lv == nil || lv.sess == nil {
		return
	}
	t.keepOrRelease(ctx, lv, status, err)
}

// settledStatus is the ledger status of a turn that ended with out, err.
func settledStatus(out agent.Outcome, err error) store.TurnStatus {
	switch {
	case err != nil:
		if out.StopReason == agent.StopCancelled {
			return store.TurnCancelled
		}
		return store.TurnFailed
	case out.StopReason == agent.StopCancelled:
		return store.TurnCancelled
	case out.StopReason == agent.StopPaused:
		return store.TurnPaused
	}
	return store.TurnCompleted
}

// emitEnd emits the turn's error, its assistant text (into the session
// log only) and its usage.
func (t *turn) emitEnd(out agent.Outcome, err error, status store.TurnStatus) {
	if t.key.SessionID != "" && t.evlog != nil {
		if err != nil {
			t.emit(wire.Event{Type: wire.EventError, Message: err.Error()})
		}
		if text := t.outputText(); text != "" {
			// A failed turn's text stays readable in the log, marked, but
			// is not conversation: often it is the harness's report of
			// the failure ("API Error: 401 …"), which a replay would put
			// in the model's mouth.
			t.record(wire.Event{Type: wire.EventMessage, Role: "assistant", Text: text, IsError: status == store.TurnFailed}, false)
		}
	} else if err != nil {
		t.emit(wire.Event{Type: wire.EventError, Message: err.Error()})
	}
	if err == nil && out.Usage != nil {
		t.emit(wire.UsageEvent(*out.Usage))
	}
}

// outcome is the turn's ledger outcome, nil for a turn without one; it
// records the session's new sandbox or harness session first and sets
// t.stored to the session as the turn leaves it.
func (t *turn) outcome(ctx context.Context, lv *live, out agent.Outcome, err error, status store.TurnStatus) *store.Turn {
	if t.key.SessionID == "" || t.index < 0 {
		return nil
	}
	rec := store.Turn{ProjectID: t.key.ProjectID, SessionID: t.key.SessionID, Index: t.index, Status: status, EndedAt: time.Now(), StopReason: out.StopReason, Generation: t.generation}
	if out.Usage != nil {
		rec.Usage = *out.Usage
	}
	if err != nil {
		rec.Error = err.Error()
	}
	sessRec := store.Session{ID: t.key.SessionID, ProjectID: t.key.ProjectID, Harness: t.plan.harness.spec.Name, Status: store.SessionActive, Generation: t.generation}
	if lv != nil {
		rec.SandboxProvider, rec.SandboxID = lv.provider, lv.sb.Info().ID
		sessRec.SandboxProvider, sessRec.SandboxID = lv.provider, lv.sb.Info().ID
		if lv.sess != nil {
			rec.AgentSessionID = lv.sess.ID()
			sessRec.AgentSessionID = lv.sess.ID()
		}
	}
	stored := t.begun
	stored.LastTurnIndex = t.index
	if sessRec.SandboxID != t.begun.SandboxID || sessRec.AgentSessionID != t.begun.AgentSessionID || sessRec.Harness != t.begun.Harness || sessRec.SandboxProvider != t.begun.SandboxProvider {
		if got, e := t.svc.store.PutSession(ctx, sessRec); e != nil {
			t.log.Error("record session", logkey.Error, e)
			t.svc.forgetHold(t.key)
		} else {
			stored = got
		}
	}
	t.stored = &stored
	return &rec
}

// commitDone commits done with the outcome and only then sends it; it
// returns err, or the store's failure when the commit failed (the
// turn's harness is then not kept).
func (t *turn) commitDone(done wire.Event, outcome *store.Turn, err error) error {
	if t.evlog == nil {
		t.emit(done)
		return err
	}
	// The outcome and done in one commit; done reaches anyone only
	// after it.
	if werr := t.finish(done, outcome); errors.Is(werr, errdefs.ErrFenced) {
		t.svc.forgetHold(t.key) // another replica owns the session now
		t.log.Error("session taken over by another replica during the turn; its writes were refused", logkey.Error, werr)
		t.storeErr = t.fenced(werr)
	} else if werr != nil {
		t.svc.forgetHold(t.key) // the log's last seq is unknown
		t.log.Error("event log incomplete for this turn", logkey.Error, werr)
		t.storeErr = t.svc.storeFailed("did not record the turn", werr)
		if outcome != nil && !refused(werr) {
			rec := *outcome
			rec.TurnID = t.plan.req.TurnID
			t.svc.retryOutcome(rec, t.storeErr)
		}
	}
	t.hub.Release() // done is the last record it publishes
	if err == nil && t.storeErr != nil {
		err = t.storeErr // its harness is not kept
	}
	if t.stored != nil {
		t.stored.LastSeq = t.lastSeq()
	}
	return err
}

// keepOrRelease parks the turn's harness warm when the session may
// continue on it, and releases it (its stages undone) otherwise.
func (t *turn) keepOrRelease(ctx context.Context, lv *live, status store.TurnStatus, err error) {
	lv.attach(nil)
	if lv.binding != nil {
		lv.binding.Use(nil)
	}
	if t.key.SessionID != "" && t.svc.pools[lv.provider] != nil && err == nil && (status == store.TurnCompleted || status == store.TurnPaused) && !t.clientPaused.Load() {
		lv.historyFP = historyFingerprint(t.plan.req.Messages)
		t.mu.Lock()
		until := t.leaseUntil
		t.mu.Unlock()
		lv.generation = t.generation
		if t.svc.park(t.key, lv, status == store.TurnPaused, until, t.stored) {
			return
		}
		lv.release(ctx, pool.ReasonContinuityInvalid)
		t.svc.releaseLease(t.key)
		return
	}
	// A failed turn's sandbox is parked, not deleted: it holds what the
	// agent installed outside the workspace (packages, caches), which the
	// failure did not spoil — unless the sandbox itself is what failed.
	reason := pool.ReasonFailedTurn
	switch {
	case err == nil && status == store.TurnCompleted:
		reason = pool.ReasonCleanResumable
	case status == store.TurnCancelled:
		reason = pool.ReasonAborted
	case errors.Is(err, sandbox.ErrGone):
		reason = reasonSandboxGone
	}
	lv.release(ctx, reason)
	t.svc.releaseLease(t.key)
}

// park keeps lv warm in the pool and extends the session's lease to cover
// the time it stays there. It returns false, parking nothing, when the
// renewal finds the lease past lv's generation: another replica ran the
// session since, and the harness no longer holds its conversation.
func (s *Service) park(key store.SessionKey, lv *live, awaiting bool, leaseUntil time.Time, stored *store.Session) bool {
	ttl := s.pools[lv.provider].TTL(awaiting)
	// Renew only when the lease the turn holds would lapse while parked: a
	// write per warm turn saved.
	if now := time.Now(); leaseUntil.Before(now.Add(ttl + 10*time.Second)) {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TeardownTimeout)
		l, err := s.store.AcquireLease(ctx, key, s.cfg.ReplicaID, now, ttl+s.cfg.LeaseTTL)
		cancel()
		switch {
		case err == nil && l.Generation != lv.generation:
			s.log.Warn("session changed hands while its turn ran; its harness is not kept warm", logkey.Session, key.SessionID, logkey.Project, key.ProjectID, "generation", l.Generation, "turn_generation", lv.generation)
			return false
		case err != nil:
			s.log.Warn("renew session lease for the warm harness", logkey.Session, key.SessionID, logkey.Project, key.ProjectID, logkey.Error, err)
			stored = nil
		default:
			leaseUntil = now.Add(ttl + s.cfg.LeaseTTL)
		}
	}
	if stored != nil {
		s.hold(key, leaseUntil, lv.generation, stored)
	} else {
		s.forgetHold(key)
	}
	lv.parkedAt = time.Now()
	s.pools[lv.provider].Park(&pool.Entry{Key: poolKey(key), Value: lv, Release: func(ctx context.Context, reason string) {
		lv.release(ctx, reason)
		s.releaseLease(key)
	}}, awaiting)
	return true
}

func (s *Service) releaseLease(k store.SessionKey) {
	s.forgetHold(k)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TeardownTimeout)
	defer cancel()
	if err := s.store.ReleaseLease(ctx, k, s.cfg.ReplicaID); err != nil {
		s.log.Warn("release session lease", logkey.Session, k.SessionID, logkey.Project, k.ProjectID, logkey.Error, err)
	}
}

// recordSandbox records the sandbox of session k; the zero k keeps the
// session it was recorded with.
func (s *Service) recordSandbox(info sandbox.Info, k store.SessionKey, state store.SandboxState) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TeardownTimeout)
	defer cancel()
	rec := store.Sandbox{Provider: info.Provider, ID: info.ID, ProjectID: k.ProjectID, SessionID: k.SessionID, State: state}
	if k.SessionID == "" {
		if old, err := s.store.GetSandbox(ctx, info.Provider, info.ID); err == nil {
			rec.ProjectID, rec.SessionID = old.ProjectID, old.SessionID
		}
	}
	if _, err := s.store.PutSandbox(ctx, rec); err != nil {
		s.log.Warn("record sandbox", logkey.Sandbox, info.ID, logkey.Error, err)
	}
}

// finish ends the turn's event log with done, committed together with the
// outcome end, and only then publishes done to followers and the caller:
// whoever sees done can read the outcome.
func (t *turn) finish(done wire.Event, end *store.Turn) error {
	t.mu.Lock()
	t.seq++
	seq := t.seq
	at := len(t.events)
	t.events = append(t.events, done)
	if t.observers != nil {
		t.observeEvent(done)
	}
	t.mu.Unlock()
	endErr, err := t.evlog.Finish(store.Event{Seq: seq, TurnIndex: t.index, Time: time.Now(), Event: done}, end)
	if berr := t.evlog.AwaitBegin(); berr != nil {
		// Not in the ledger (nothing of it was written): not done.
		t.beginErr = fmt.Errorf("record the turn in the ledger: %w", berr)
		err = errors.Join(err, t.beginErr)
	} else if endErr != nil {
		t.log.Error("record turn outcome", logkey.Error, endErr)
	}
	t.mu.Lock()
	if err != nil {
		// Not all on disk: not done, whatever the harness said.
		done.StopReason = "error"
		t.events[at] = done
	}
	t.hub.Committed(seq) // committed, or failed for good: the log is all there will be
	t.hub.Publish(wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &done})
	t.mu.Unlock()
	if t.sink != nil {
		t.sink(seq, done)
	}
	return err
}
