package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
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
	if h, ok := s.heldLease(t.key); ok && h.until.After(now.Add(s.cfg.LeaseTTL/2)) {
		t.leaseUntil = h.until
		t.cached = h.session
		return nil
	}
	if _, err := s.store.AcquireLease(ctx, t.key, s.cfg.ReplicaID, now, s.cfg.LeaseTTL); err != nil {
		s.unclaim(t)
		var le *store.LeaseError
		if errors.As(err, &le) {
			return le // the API forwards the turn to the holder (peers.go)
		}
		return s.storeFailed("did not lease session "+t.key.String(), err)
	}
	t.leaseUntil = now.Add(s.cfg.LeaseTTL)
	return nil
}

// heldSession is what this replica knows of a session it holds.
type heldSession struct {
	until   time.Time
	session *store.Session // nil when unknown
}

func (s *Service) heldLease(k store.SessionKey) (heldSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[k]
	return h, ok
}

// hold records this replica's lease on a session (until) and, when known,
// the session record as it now stands.
func (s *Service) hold(k store.SessionKey, until time.Time, sess *store.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[k] = heldSession{until: until, session: sess}
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
