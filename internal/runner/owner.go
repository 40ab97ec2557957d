package runner

import (
	"context"
	"fmt"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/store"
)

// claimOwner refuses a cold turn on a session the platform says another
// replica owns, when nothing else would keep the two replicas apart: the
// sandbox is on this host (the local provider) and the store is this
// replica's own (SQLite), so the other replica, with a store of its own,
// may be running the session too. A store the replicas share decides by
// its lease (claim). A warm session is this replica's: its turns skip the
// claim here and the observers send it off the turn's path.
func (s *Service) claimOwner(ctx context.Context, t *turn) error {
	if t.key.SessionID == "" || !s.sharesHost(t.plan.provider) {
		return nil
	}
	if rl, ok := s.store.(store.ReplicaLocal); !ok || !rl.ReplicaLocal() {
		return nil
	}
	if pl := s.pools[t.plan.provider]; pl != nil && pl.Has(poolKey(t.key)) {
		return nil
	}
	for _, o := range s.cfg.Observers {
		oc, ok := o.(platform.OwnerClaimer)
		if !ok {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.OwnerClaimTimeout)
		owner := oc.ClaimOwner(cctx, t.plan.req)
		cancel()
		t.ownerClaimed = true
		if owner != "" && owner != s.cfg.ReplicaID {
			return errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s is owned by replica %s on the platform; this replica (%s) keeps sessions in its own store and runs them on this host, so it refuses to start one another replica may be running: route the session to %s, or give the replicas one PostgreSQL store (AGENTA_RUNNER_DATABASE_URL)",
				t.plan.req.SessionID, owner, s.cfg.ReplicaID, owner))
		}
	}
	return nil
}
