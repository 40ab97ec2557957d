package runner

import (
	"context"
	"errors"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
)

// Holder returns session k's lease when another replica holds it now: a
// request for k belongs there (internal/peer forwards it). A free, expired
// or own lease reports false.
func (s *Service) Holder(ctx context.Context, k store.SessionKey) (store.Lease, bool, error) {
	if k.SessionID == "" {
		return store.Lease{}, false, nil
	}
	l, err := s.store.GetLease(ctx, k)
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.Lease{}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, s.storeFailed("did not read the lease of session "+k.String(), err)
	}
	if l.Owner == s.cfg.ReplicaID || !time.Now().Before(l.Expires) {
		return store.Lease{}, false, nil
	}
	return l, true, nil
}

// TakeOver takes session from.Key() from a replica found gone, by
// compare-and-set on the lease as it was read (from): its next turn runs
// here, cold, from the shared store, and the old owner's writes, which
// carry the old generation, are refused. A lease that moved on since is a
// *store.LeaseError (read it again); one that is free now is not an error
// (the next turn acquires it).
func (s *Service) TakeOver(ctx context.Context, from store.Lease) error {
	k := from.Key()
	l, err := s.store.TakeOverLease(ctx, k, s.cfg.ReplicaID, from, time.Now(), s.cfg.LeaseTTL)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	var le *store.LeaseError
	if errors.As(err, &le) {
		return err
	}
	if err != nil {
		return s.storeFailed("did not take over session "+k.String(), err)
	}
	s.log.Info("took the session over from a replica that is gone", logkey.Session, k.SessionID, logkey.Project, k.ProjectID,
		"from", from.Owner, "generation", l.Generation)
	s.endLostTurn(ctx, l, from.Owner)
	return nil
}

// Draining reports whether the replica is stopping: it takes no new
// turns, and a forwarded request should be taken over by its sender.
func (s *Service) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining || s.closing
}

// ReplicaID is this replica's id in leases, the ledger and the registry.
func (s *Service) ReplicaID() string { return s.cfg.ReplicaID }
