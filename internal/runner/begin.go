package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/eventlog"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

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
		sess, err = st.PutSession(ctx, store.Session{ID: t.key.SessionID, ProjectID: t.key.ProjectID, Harness: p.harness.spec.Name, Status: store.SessionActive, Generation: t.generation})
	case err == nil && sess.Status == store.SessionDeleted:
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s was deleted; start a new sessionId", sess.ID))
	}
	if errors.Is(err, errdefs.ErrFenced) {
		return nil, t.fenced(err)
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", t.key, t.svc.storeFailed("did not read or record the session", err))
	}
	rec := store.Turn{
		ProjectID: sess.ProjectID, SessionID: sess.ID, Index: sess.LastTurnIndex + 1, TurnID: p.req.TurnID, Harness: p.harness.spec.Name,
		SandboxProvider: p.provider, StartedAt: time.Now(), Owner: t.svc.cfg.ReplicaID, Generation: t.generation,
	}
	// While this replica holds the lease, nobody else begins a turn of the
	// session: its begin rides in the first events' commit, beside the
	// harness. Otherwise the ledger decides, first.
	var begin *store.Turn
	if _, ok := st.(store.TurnWriter); ok && t.cached != nil {
		begin = &rec
	} else if _, err := st.BeginTurn(ctx, rec); errors.Is(err, errdefs.ErrFenced) {
		return nil, t.fenced(err)
	} else if err != nil {
		return nil, fmt.Errorf("begin turn of session %s: %w", sess.ID, t.svc.storeFailed("did not record the turn", err))
	}
	t.index = rec.Index
	t.begun = sess
	t.mu.Lock()
	t.seq = sess.LastSeq
	t.hub = t.svc.hubs.Acquire(t.key) // released by settle
	t.evlog = eventlog.New(st, t.key, eventlog.Options{Log: t.log, Begin: begin, Generation: t.generation, Delay: t.svc.cfg.EventCommitDelay, Saved: t.hub.Committed})
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
				l, err := t.svc.store.AcquireLease(ctx, t.key, t.svc.cfg.ReplicaID, now, t.svc.cfg.LeaseTTL)
				cancel()
				if err == nil && l.Generation != t.generation {
					// Lost and taken back since the turn began: whoever
					// held it between may have written; the turn's own
					// writes are fenced.
					err = fmt.Errorf("the lease is at generation %d, the turn's %d", l.Generation, t.generation)
				}
				var le *store.LeaseError
				if errors.As(err, &le) {
					// Taken over: nothing more of the turn can be
					// recorded, so it stops now rather than at its end.
					t.log.Error("session taken over by another replica during the turn", logkey.Error, err)
					t.cancel(t.fenced(err))
					return
				}
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
