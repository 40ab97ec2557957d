package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, k store.SessionKey, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidateLease(k, owner, ttl); err != nil {
		return store.Lease{}, err
	}
	for {
		out, err := sqlstore.ScanLease(s.db.QueryRow(ctx, `
INSERT INTO leases (project_id, session_id, owner, expires_at) VALUES ($5, $1, $2, $3)
ON CONFLICT (project_id, session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE leases.owner = excluded.owner OR leases.expires_at <= $4
RETURNING `+sqlstore.LeaseCols, k.SessionID, owner, now.Add(ttl).UnixMilli(), now.UnixMilli(), k.ProjectID), k)
		if errors.Is(err, pgx.ErrNoRows) {
			err = s.heldBy(ctx, k)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // released since: try again
			}
		}
		if err != nil {
			return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
		}
		return out, nil
	}
}

// heldBy returns the *store.LeaseError naming the session's current
// holder, or pgx.ErrNoRows if there is none.
func (s *Store) heldBy(ctx context.Context, k store.SessionKey) error {
	return sqlstore.HeldBy(s.db.QueryRow(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = $1 AND session_id = $2`, k.ProjectID, k.SessionID), k)
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, k store.SessionKey, owner string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM leases WHERE project_id = $1 AND session_id = $2 AND owner = $3`, k.ProjectID, k.SessionID, owner)
	if err == nil && tag.RowsAffected() == 0 {
		if err = s.heldBy(ctx, k); errors.Is(err, pgx.ErrNoRows) {
			err = nil // there was no lease
		}
	}
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	return nil
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, k store.SessionKey) (store.Lease, error) {
	out, err := sqlstore.ScanLease(s.db.QueryRow(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = $1 AND session_id = $2`, k.ProjectID, k.SessionID), k)
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease %s: %w", k, notFound(err))
	}
	return out, nil
}
