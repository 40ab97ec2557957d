package runner

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/eventlog"
	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/tools/relay"
	"github.com/agentrunner/runner/internal/wire"
)

// turn is one Run in flight.
type turn struct {
	svc    *Service
	plan   *plan
	key    store.SessionKey // zero for a turn without a session
	log    *slog.Logger
	sink   Sink
	cancel context.CancelCauseFunc
	done   chan struct{}
	caps   *wire.Capabilities
	// agentSession is the harness's session id once it is open: the
	// result's sessionId when the caller sent none, as the reference does.
	agentSession string
	index        int // ledger index, -1 without a session
	evlog        *eventlog.Log
	// beginErr is set when the ledger refused the turn's begin, which
	// rides in its events' commit; storeErr when its commit failed (or
	// the begin was refused): the turn then fails.
	beginErr error
	storeErr error
	hub      *eventlog.Hub // the session's followers, set with evlog
	watch    *watchdog
	// leaseUntil is when the session lease this turn holds runs out.
	leaseUntil time.Time
	// cached is the session record as this replica's last turn left it,
	// valid because the replica held the lease since; nil to read it.
	cached *store.Session
	// begun is the session record as the turn began; stored, as it ended.
	begun  store.Session
	stored *store.Session
	// priorSeq is the session log's last sequence number before this turn
	// when the caller sent only its newest message; 0 otherwise.
	priorSeq int64
	lv       *live      // the harness serving this turn, once acquired
	tools    *tools.Set // this turn's tools, nil without customTools
	// observers follow the turn (observe.go); project is the project the
	// platform named for a request without one (guarded by svc.mu).
	observers []platform.TurnObserver
	project   string
	// ownerClaimed is set when Start awaited the platform's owner claim
	// (owner.go): the observers need not send it again.
	ownerClaimed bool
	// clientPaused is set when a client tool paused the turn: its
	// harness is never kept warm (the result returns on a cold resume).
	clientPaused atomic.Bool
	obs          turnObs // for metrics (metrics.go)
	// heard counts the harness's events this turn; fellBack is set once
	// the turn moved to a fresh sandbox (fallback.go).
	heard    atomic.Int64
	fellBack bool
	// streamed is set when the caller streams the events and drops the
	// result's list (Turn.Streamed); capped once a cap ended the turn
	// (caps.go).
	streamed bool
	capped   atomic.Bool

	// mu guards the following: events arrive on the harness's reader.
	mu        sync.Mutex
	seq       int64
	output    []byte // the assistant text, append-only (caps.go)
	outputCut bool   // output reached its cap
	events    []wire.Event
	kept      int // about the bytes of events
	logged    int // about the bytes of the harness's events in the log
}

func (t *turn) waitDone(ctx context.Context) {
	select {
	case <-t.done:
	case <-ctx.Done():
	}
}

func (t *turn) lastSeq() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seq
}

func (t *turn) outputText() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.outputLocked()
}

func (t *turn) eventList() []wire.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]wire.Event{}, t.events...)
}

// emit records an event, logs it in the session and forwards it to the
// caller and to followers of the session.
func (t *turn) emit(ev wire.Event) {
	t.record(ev, true)
}

// fromHarness is the sink of the harness's own events: they, and not
// the runner's, show the harness is alive to the run limits.
func (t *turn) fromHarness(ev wire.Event) {
	if t.capped.Load() {
		return // the turn is ending; the harness is told to stop
	}
	t.heard.Add(1)
	if t.watch != nil {
		t.watch.touch()
	}
	t.meterEvent(ev)
	t.plan.renders.hint(&ev)
	if err := t.admit(&ev); err != nil {
		t.trip(err)
		return
	}
	t.emit(ev)
}

// record is emit; live=false keeps the event out of the caller's stream
// (coalesced messages kept only in the session log).
func (t *turn) record(ev wire.Event, live bool) {
	t.mu.Lock()
	if ev.Type == wire.EventMessageDelta {
		t.writeOutputLocked(ev.Delta)
	}
	var seq int64
	if !ev.Transient && live {
		t.keepLocked(ev)
	}
	if live && t.observers != nil {
		t.observeEvent(ev)
	}
	if !ev.Transient && t.evlog != nil {
		t.seq++
		seq = t.seq
		t.evlog.Add(store.Event{Seq: seq, TurnIndex: t.index, Time: time.Now(), Event: ev})
		// Followers get every logged record, in sequence order (hence
		// under the lock; publish never blocks).
		t.hub.Publish(wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &ev})
	}
	t.mu.Unlock()
	if live && t.sink != nil {
		t.sink(seq, ev)
	}
}

// live is a harness session with its sandbox: what the pool keeps warm.
type live struct {
	sb        sandbox.Sandbox
	sess      agent.Session
	harness   string
	provider  string
	configFP  string
	historyFP string // of the conversation the next turn must continue
	epoch     string
	stateKey  string
	awaiting  bool              // parked waiting for approval
	binding   *relay.Binding    // the tool relay's binding, nil without tools
	route     *gateway.Route    // the key gateway's route, nil when keys are not hidden
	env       map[string]string // the model environment the harness sees
	req       *wire.Request     // the request the harness is configured from
	channel   *channels         // streams from a remote sandbox to the runner
	forward   sandbox.Process   // the in-sandbox model forward, remote only
	diagnose  func(context.Context, DiagnoseInput) error
	durable   *durable  // the synced durable trees, nil without a store
	parkedAt  time.Time // when it was last parked warm
	undos     []undo    // its set-up stages' teardown, in setup order (stages.go)

	// mu guards the following.
	mu    sync.Mutex
	cur   *turn  // the turn the session's callbacks serve now
	gates []gate // permission requests parked for a person
}

func (lv *live) addGate(g gate) {
	lv.mu.Lock()
	lv.gates = append(lv.gates, g)
	lv.mu.Unlock()
}

func (lv *live) takeGates() []gate {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	g := lv.gates
	lv.gates = nil
	return g
}

func (lv *live) turn() *turn {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.cur
}

func (lv *live) attach(t *turn) {
	lv.mu.Lock()
	lv.cur = t
	lv.mu.Unlock()
}

func (t *turn) run(ctx context.Context) (out agent.Outcome, err error) {
	defer close(t.done)
	defer t.svc.unclaim(t)
	t.emit(wire.DataEvent("agent-status", map[string]string{"phase": "environment_starting"}, true))

	if _, err := t.begin(ctx); err != nil {
		return agent.Outcome{}, err
	}
	if t.key.SessionID != "" {
		stop := t.keepLease()
		defer stop()
	}
	var lv *live
	defer func() {
		t.settle(lv, out, err)
		if err == nil && t.storeErr != nil {
			// Its commit failed, or its begin rode in it and was refused.
			err = t.storeErr
		}
	}()

	if t.tools, err = t.toolSet(); err != nil {
		return agent.Outcome{}, err
	}
	lv, out, err = t.attempt(ctx)
	if t.fallback(ctx, lv, &err) { // fallback.go
		lv, out, err = t.attempt(ctx)
	}
	return out, err
}

// attempt runs the turn on the session's warm harness or a cold one.
func (t *turn) attempt(ctx context.Context) (lv *live, out agent.Outcome, err error) {
	lv, how, prior, err := t.acquire(ctx)
	if err != nil {
		return nil, agent.Outcome{}, err
	}
	t.lv = lv
	t.agentSession = lv.sess.ID()
	lv.attach(t)
	finish := t.checkpoints(ctx, lv, how == acquiredWarm) // durable.go
	defer func() { err = finish(err) }()
	if lv.binding != nil {
		lv.binding.Use(t.tools)
	}
	caps := lv.sess.Info().Capabilities
	t.caps = &caps
	t.emit(wire.DataEvent("agent-status", map[string]string{"phase": "environment_ready"}, true))

	if how == acquiredWarm && lv.awaiting {
		lv.awaiting = false
		t.record(agentSessionEvent(acquiredResume, lv), true)
		out, ok, err := t.resumeWarm(ctx, lv)
		if ok || err != nil {
			return lv, out, err
		}
		// The tail answered none of the parked requests: treat it as a new
		// message on the live session.
	}
	blocks, how := t.promptBlocks(lv, how, prior)
	t.record(agentSessionEvent(how, lv), true)
	att, err := t.attachmentBlocks(ctx, lv)
	if err != nil {
		return lv, agent.Outcome{}, err
	}
	blocks = append(blocks, att...)
	if out, err = lv.sess.Prompt(ctx, blocks, t.fromHarness); err == nil {
		err = t.diagnose(ctx, lv, out)
	}
	out, err = t.clientPause(ctx, out, err)
	return lv, out, err
}

// acquire takes the session's warm harness or sets up a cold one, with
// the conversation the log holds when the caller sent only its newest
// message and the harness is cold.
func (t *turn) acquire(ctx context.Context) (lv *live, how acquired, prior []wire.Message, err error) {
	if t.key.SessionID != "" && !t.fellBack {
		if lv = t.warm(); lv != nil {
			t.obs.warm = true
			return lv, acquiredWarm, nil, nil
		}
	}
	if prior, err = t.prior(ctx); err != nil {
		return nil, 0, nil, err
	}
	if lv, err = t.cold(ctx); err != nil { // stages.go
		return nil, 0, nil, err
	}
	if lv.sess.Info().Loaded {
		return lv, acquiredLoad, prior, nil
	}
	return lv, acquiredNew, prior, nil
}

// promptBlocks is the prompt for the harness lv: the tail alone for a
// harness that holds the conversation, else the conversation replayed
// (how becomes acquiredReplay) or framed for a loaded transcript.
func (t *turn) promptBlocks(lv *live, how acquired, prior []wire.Message) ([]json.RawMessage, acquired) {
	p := t.plan
	blocks := p.tail
	if how == acquiredNew || how == acquiredLoad || p.approvalOnly {
		history := p.history
		if len(history) == 0 && len(prior) > 0 {
			history = prior // the caller sent only its new message; the log knows the rest
		}
		text := p.tailText
		if p.approvalOnly {
			text = approvalFrame(history, p.approvals)
			if len(p.approvals) == 0 {
				text = clientResultFrame(history)
			}
		}
		if how == acquiredLoad {
			blocks = append([]json.RawMessage{textBlock(text)}, nonText(p.tail)...)
		} else if full := replay(history, text, t.svc.cfg.HistoryMaxChars); full != p.tailText {
			blocks = append([]json.RawMessage{textBlock(full)}, nonText(p.tail)...)
			how = acquiredReplay
		}
	}
	if g, ok := lv.workspaceGuidance(); ok && (how == acquiredNew || how == acquiredReplay) {
		blocks = append([]json.RawMessage{g}, blocks...)
	}
	return blocks, how
}

// begin records the turn in the ledger and opens its event log. It returns
// the conversation the log holds, for a cold turn whose caller sent only
// its newest message.
func (t *turn) begin(ctx context.Context) ([]wire.Message, error) {
	if t.key.SessionID == "" {
		t.observe(ctx)
		return nil, nil
	}
	p := t.plan
	st := t.svc.store
	var sess store.Session
	var err error
	if t.cached != nil {
		sess = *t.cached
	} else {
		sess, err = st.GetSession(ctx, t.key)
	}
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		sess, err = st.PutSession(ctx, store.Session{ID: t.key.SessionID, ProjectID: t.key.ProjectID, Harness: p.harness.spec.Name, Status: store.SessionActive})
	case err == nil && sess.Status == store.SessionDeleted:
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s was deleted; start a new sessionId", sess.ID))
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", t.key, t.svc.storeFailed("did not read or record the session", err))
	}
	rec := store.Turn{
		ProjectID: sess.ProjectID, SessionID: sess.ID, Index: sess.LastTurnIndex + 1, TurnID: p.req.TurnID, Harness: p.harness.spec.Name,
		SandboxProvider: p.provider, StartedAt: time.Now(), Owner: t.svc.cfg.ReplicaID,
	}
	// While this replica holds the lease, nobody else begins a turn of the
	// session: its begin rides in the first events' commit, beside the
	// harness. Otherwise the ledger decides, first.
	var begin *store.Turn
	if _, ok := st.(store.TurnWriter); ok && t.cached != nil {
		begin = &rec
	} else if _, err := st.BeginTurn(ctx, rec); err != nil {
		return nil, fmt.Errorf("begin turn of session %s: %w", sess.ID, t.svc.storeFailed("did not record the turn", err))
	}
	t.index = rec.Index
	t.begun = sess
	t.mu.Lock()
	t.seq = sess.LastSeq
	t.hub = t.svc.hubs.Acquire(t.key) // released by settle
	t.evlog = eventlog.New(st, t.key, eventlog.Options{Log: t.log, Begin: begin, Delay: t.svc.cfg.EventCommitDelay, Saved: t.hub.Committed})
	t.mu.Unlock()
	t.record(wire.Event{Type: wire.EventMessage, Role: "user", Text: p.tailText}, false)
	t.observe(ctx)

	if len(p.history) > 0 || sess.LastSeq == 0 {
		return nil, nil
	}
	t.priorSeq = sess.LastSeq
	return nil, nil
}

// prior is the conversation the log holds before this turn, read only
// when a cold harness needs it and the caller sent only its new message.
func (t *turn) prior(ctx context.Context) ([]wire.Message, error) {
	if t.priorSeq == 0 {
		return nil, nil
	}
	return t.svc.conversation(ctx, t.key, t.priorSeq)
}

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

// settle ends the turn: the ledger and event log are written before the
// result is returned, then the harness is parked warm or released.
func (t *turn) settle(lv *live, out agent.Outcome, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.svc.cfg.TeardownTimeout)
	defer cancel()
	status := store.TurnCompleted
	switch {
	case err != nil:
		status = store.TurnFailed
		if out.StopReason == agent.StopCancelled {
			status = store.TurnCancelled
		}
	case out.StopReason == agent.StopCancelled:
		status = store.TurnCancelled
	case out.StopReason == agent.StopPaused:
		status = store.TurnPaused
	}
	if t.key.SessionID != "" {
		// Before the result: a paused turn is resumable once it says so.
		t.svc.rememberPause(ctx, t.log, t.key, t.plan, status == store.TurnPaused)
	}
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
	var outcome *store.Turn
	if t.key.SessionID != "" && t.index >= 0 {
		rec := store.Turn{ProjectID: t.key.ProjectID, SessionID: t.key.SessionID, Index: t.index, Status: status, EndedAt: time.Now(), StopReason: out.StopReason}
		if out.Usage != nil {
			rec.Usage = *out.Usage
		}
		if err != nil {
			rec.Error = err.Error()
		}
		sessRec := store.Session{ID: t.key.SessionID, ProjectID: t.key.ProjectID, Harness: t.plan.harness.spec.Name, Status: store.SessionActive}
		if lv != nil {
			rec.SandboxProvider, rec.SandboxID = lv.provider, lv.sb.Info().ID
			sessRec.SandboxProvider, sessRec.SandboxID = lv.provider, lv.sb.Info().ID
			if lv.sess != nil {
				rec.AgentSessionID = lv.sess.ID()
				sessRec.AgentSessionID = lv.sess.ID()
			}
		}
		outcome = &rec
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
	}
	stop := out.StopReason
	if err != nil && stop != agent.StopCancelled {
		stop = "error"
	}
	done := wire.Event{Type: wire.EventDone, StopReason: stop, TraceID: t.traceID()}
	if t.evlog != nil {
		// The outcome and done in one commit; done reaches anyone only
		// after it.
		if werr := t.finish(done, outcome); werr != nil {
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
	} else {
		t.emit(done)
	}
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
	lv.attach(nil)
	if lv.binding != nil {
		lv.binding.Use(nil)
	}
	if t.key.SessionID != "" && t.svc.pools[lv.provider] != nil && err == nil && (status == store.TurnCompleted || status == store.TurnPaused) && !t.clientPaused.Load() {
		lv.historyFP = historyFingerprint(t.plan.req.Messages)
		t.mu.Lock()
		until := t.leaseUntil
		t.mu.Unlock()
		t.svc.park(t.key, lv, status == store.TurnPaused, until, t.stored)
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
// the time it stays there.
func (s *Service) park(key store.SessionKey, lv *live, awaiting bool, leaseUntil time.Time, stored *store.Session) {
	ttl := s.pools[lv.provider].TTL(awaiting)
	// Renew only when the lease the turn holds would lapse while parked: a
	// write per warm turn saved.
	if now := time.Now(); leaseUntil.Before(now.Add(ttl + 10*time.Second)) {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TeardownTimeout)
		if _, err := s.store.AcquireLease(ctx, key, s.cfg.ReplicaID, now, ttl+s.cfg.LeaseTTL); err != nil {
			s.log.Warn("renew session lease for the warm harness", logkey.Session, key.SessionID, logkey.Project, key.ProjectID, logkey.Error, err)
			stored = nil
		} else {
			leaseUntil = now.Add(ttl + s.cfg.LeaseTTL)
		}
		cancel()
	}
	if stored != nil {
		s.hold(key, leaseUntil, stored)
	} else {
		s.forgetHold(key)
	}
	lv.parkedAt = time.Now()
	s.pools[lv.provider].Park(&pool.Entry{Key: poolKey(key), Value: lv, Release: func(ctx context.Context, reason string) {
		lv.release(ctx, reason)
		s.releaseLease(key)
	}}, awaiting)
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

// loadable returns the harness session id to session/load: only when this
// harness wrote the session's latest turn and that turn completed (a
// paused, failed or cancelled turn may have left a partial transcript).
func (s *Service) loadable(ctx context.Context, k store.SessionKey, harness string) string {
	turns, err := s.store.ListTurns(ctx, k)
	if err != nil {
		return ""
	}
	for i := len(turns) - 1; i >= 0; i-- {
		tr := turns[i]
		if tr.Status == store.TurnRunning {
			continue // this turn
		}
		if tr.Status == store.TurnCompleted && tr.Harness == harness && tr.AgentSessionID != "" {
			return tr.AgentSessionID
		}
		return ""
	}
	return ""
}

// conversation rebuilds the session's messages from its log: the user
// prompts and assistant answers of earlier turns.
func (s *Service) conversation(ctx context.Context, k store.SessionKey, upTo int64) ([]wire.Message, error) {
	evs, err := s.store.ReadEvents(ctx, k, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("read the session log to rebuild its history: %w", err)
	}
	var out []wire.Message
	for _, e := range evs {
		if e.Seq > upTo || e.Event.Type != wire.EventMessage || e.Event.IsError {
			continue
		}
		out = append(out, wire.Message{Role: e.Event.Role, Content: wire.MessageContent{Text: e.Event.Text, IsText: true}})
	}
	return out, nil
}

func nonText(blocks []json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, b := range blocks {
		var h struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &h) == nil && h.Type != "text" {
			out = append(out, b)
		}
	}
	return out
}

// writeFiles writes the instructions file and harnessFiles before the
// session opens: harnesses read them once, at session start.
func (t *turn) writeFiles(ctx context.Context, sb sandbox.Sandbox) error {
	p := t.plan
	wd := sb.Info().Workdir
	if p.req.AgentsMD != "" {
		name := p.harness.spec.Instructions
		if name == "" {
			name = "AGENTS.md"
		}
		if err := sb.WriteFile(ctx, path.Join(wd, name), []byte(p.req.AgentsMD), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	for i, f := range p.req.HarnessFiles {
		if err := sb.WriteFile(ctx, path.Join(wd, path.Clean(f.Path)), []byte(f.Content), 0o644); err != nil {
			return fmt.Errorf("write harnessFiles[%d] %s: %w", i, f.Path, err)
		}
	}
	return nil
}

// env is the harness's whole environment: base launch variables, the
// sandbox's own HOME, and the materialised model connection. Nothing of
// the runner's own environment is inherited.
func (t *turn) env(info sandbox.Info, model map[string]string) []string {
	env := append([]string(nil), t.svc.cfg.BaseEnv...)
	env = append(env, "HOME="+info.Home)
	for _, k := range slices.Sorted(maps.Keys(model)) {
		env = append(env, k+"="+model[k])
	}
	return env
}

// keepLease renews the turn's session lease while it runs, so a long turn
// is never taken over by another replica. It returns a stop function.
func (t *turn) keepLease() (stop func()) {
	every := t.svc.cfg.LeaseTTL / 3
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), every)
				_, err := t.svc.store.AcquireLease(ctx, t.key, t.svc.cfg.ReplicaID, now, t.svc.cfg.LeaseTTL)
				cancel()
				if err != nil {
					t.log.Error("session lease lost during the turn", logkey.Error, err)
					continue
				}
				t.mu.Lock()
				t.leaseUntil = now.Add(t.svc.cfg.LeaseTTL)
				t.mu.Unlock()
			}
		}
	}()
	return func() { close(done); <-finished }
}
