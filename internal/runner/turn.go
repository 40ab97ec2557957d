package runner

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/eventlog"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/tools"
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
	// leaseUntil is when the session lease this turn holds runs out;
	// generation is the lease's, the fence every write of the turn
	// carries (a takeover by another replica raises it: the turn's
	// writes are then refused).
	leaseUntil time.Time
	generation int64
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
	// prewarmMiss is why a turn that could have taken a pre-warmed slot
	// ran cold (prewarm.go).
	prewarmMiss string
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
		switch ev.Type {
		case wire.EventToolCall:
			t.watch.toolCall(ev.ID, ev.Name)
		case wire.EventToolResult:
			t.watch.toolResult(ev.ID)
		}
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
		t.record(t.sessionEvent(acquiredResume, lv), true)
		out, ok, err := t.resumeWarm(ctx, lv)
		if ok || err != nil {
			return lv, out, err
		}
		// The tail answered none of the parked requests: treat it as a new
		// message on the live session.
	}
	blocks, how := t.promptFor(lv, how, prior)
	t.record(t.sessionEvent(how, lv), true)
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
	t.obs.prewarmed = false
	if !t.fellBack && t.index <= 0 { // a new session's first turn, or none
		if lv = t.prewarmed(ctx); lv != nil { // prewarm.go
			t.obs.prewarmed = true
			return lv, acquiredNew, prior, nil
		}
	}
	if lv, err = t.cold(ctx); err != nil { // stages.go
		return nil, 0, nil, err
	}
	if lv.sess.Info().Loaded {
		return lv, acquiredLoad, prior, nil
	}
	return lv, acquiredNew, prior, nil
}

// promptFor is the prompt for the harness lv: the tail alone for a
// harness that holds the conversation, else the conversation replayed
// (how becomes acquiredReplay) or framed for a loaded transcript.
func (t *turn) promptFor(lv *live, how acquired, prior []wire.Message) ([]json.RawMessage, acquired) {
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
