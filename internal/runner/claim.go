package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
)

// claim makes t the session's only running turn on this replica and takes
// the session's lease, so no other replica runs it at the same time.
func (s *Service) claim(ctx context.Context, t *turn) error {
	s.mu.Lock()
	if s.closing || s.draining {
		s.mu.Unlock()
		return errDraining
	}
	if t.key.SessionID != "" {
		if other, ok := s.busy[t.key]; ok {
			s.mu.Unlock()
			return errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s already has a turn in flight (turn %s); wait for its result, or POST /kill to stop it", t.plan.req.SessionID, other.plan.req.TurnID))
		}
		s.busy[t.key] = t
	}
	s.mu.Unlock()
	if t.key.SessionID == "" {
		return nil
	}
	now := time.Now()
	if h, ok := s.heldLease(t.key); ok && h.until.After(now.Add(s.cfg.LeaseTTL/2)) && s.health.state() == nil {
		// Held: no store call. Should another replica have taken the
		// session over meanwhile, the turn's first commit carries the
		// old generation and is refused (fenced). Not while the store
		// fails: cut off from it, this replica may look gone to the
		// others, which then take its sessions over; the lease is read
		// (and the turn refused) before a harness runs on a session
		// that may be served elsewhere.
		t.leaseUntil, t.generation = h.until, h.generation
		t.cached = h.session
		return nil
	}
	l, err := s.store.AcquireLease(ctx, t.key, s.cfg.ReplicaID, now, s.cfg.LeaseTTL)
	if err != nil {
		s.unclaim(t)
		var le *store.LeaseError
		if errors.As(err, &le) {
			return le // the API forwards the turn to the holder (peers.go)
		}
		return s.storeFailed("did not lease session "+t.key.String(), err)
	}
	t.leaseUntil, t.generation = now.Add(s.cfg.LeaseTTL), l.Generation
	return nil
}

// fenced is the turn's error for err, a write the store refused because
// another replica took the session over while the turn ran here: the
// turn is not recorded past the takeover and must not report ok.
func (t *turn) fenced(err error) error {
	by, gen := "another replica", int64(0)
	var fe *store.FencedError
	var le *store.LeaseError
	switch {
	case errors.As(err, &fe):
		gen = fe.Holder.Generation
		if fe.Holder.Owner != "" {
			by = "replica " + fe.Holder.Owner
		}
	case errors.As(err, &le):
		by, gen = "replica "+le.Owner, le.Generation
	}
	return errdefs.With(errdefs.ErrFenced, fmt.Errorf("session %s was taken over by %s (lease generation %d) while this turn ran on replica %s (generation %d): its writes were refused and the turn is not recorded; send it again, the session's new owner serves it",
		t.key, by, gen, t.svc.cfg.ReplicaID, t.generation))
}

// endLostTurn records the outcome of the turn the replica lost was
// running on session l.Key(), if any: failed, naming the lost replica,
// written under l (this replica's lease since the takeover), so the
// ledger does not show it running for good. The lost replica's own end,
// should it still be alive, carries the old generation and is refused.
// Best effort: a failure is logged, and the turn is interrupted when the
// lost replica starts again (Recover).
func (s *Service) endLostTurn(ctx context.Context, l store.Lease, lost string) {
	k := l.Key()
	sess, err := s.store.GetSession(ctx, k)
	if err != nil || sess.LastTurnIndex < 0 {
		return // no session row or no turn yet: nothing ran
	}
	// A session runs one turn at a time, and indices grow: only the last
	// one can still be running.
	cur, err := s.store.GetTurn(ctx, k, sess.LastTurnIndex)
	if err != nil || cur.Status != store.TurnRunning || cur.Owner != lost {
		return
	}
	cur.Status, cur.EndedAt, cur.StopReason = store.TurnFailed, time.Now(), "error"
	cur.Error = fmt.Sprintf("replica %s was lost while it ran this turn (replica %s took the session over); the turn's output after its last recorded event is lost: send it again", lost, s.cfg.ReplicaID)
	cur.Generation = l.Generation
	if _, err := s.store.EndTurn(ctx, cur); err != nil && !refused(err) {
		s.log.Warn("record the lost replica's turn as failed", logkey.Session, k.SessionID, logkey.Project, k.ProjectID, logkey.Error, err)
	}
}

// heldSession is what this replica knows of a session it holds.
type heldSession struct {
	until      time.Time
	generation int64          // the lease's
	session    *store.Session // nil when unknown
}

func (s *Service) heldLease(k store.SessionKey) (heldSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[k]
	return h, ok
}

// hold records this replica's lease on a session (until, at generation)
// and, when known, the session record as it now stands.
func (s *Service) hold(k store.SessionKey, until time.Time, generation int64, sess *store.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[k] = heldSession{until: until, generation: generation, session: sess}
}

func (s *Service) forgetHold(k store.SessionKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, k)
}

func (s *Service) unclaim(t *turn) {
	if t.key.SessionID == "" {
		return
	}
	s.mu.Lock()
	if s.busy[t.key] == t {
		delete(s.busy, t.key)
	}
	s.mu.Unlock()
}

func (s *Service) register(t *turn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.draining {
		return errdefs.With(errdefs.ErrUnavailable, errors.New("runner is shutting down"))
	}
	s.inflight[t] = struct{}{}
	return nil
}

func (s *Service) unregister(t *turn) {
	s.mu.Lock()
	delete(s.inflight, t)
	s.mu.Unlock()
}
