package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, k store.SessionKey, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidateLease(k, owner, ttl); err != nil {
		return store.Lease{}, err
	}
	for {
		// A released row is free (its owner matches no one, expires_at
		// is 0) and keeps the generation the next owner raises.
		out, err := sqlstore.ScanLease(s.db.QueryRow(ctx, `
INSERT INTO leases (project_id, session_id, owner, expires_at, generation) VALUES ($5, $1, $2, $3, 1)
ON CONFLICT (project_id, session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,
	generation = CASE WHEN leases.owner = excluded.owner THEN leases.generation ELSE leases.generation + 1 END
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

// TakeOverLease implements store.Leases.
func (s *Store) TakeOverLease(ctx context.Context, k store.SessionKey, owner string, from store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidateTakeOver(k, owner, from, ttl); err != nil {
		return store.Lease{}, err
	}
	out, err := sqlstore.ScanLease(s.db.QueryRow(ctx, `
UPDATE leases SET owner = $1, expires_at = $2, generation = generation + 1
WHERE project_id = $3 AND session_id = $4 AND owner = $5 AND generation = $6
RETURNING `+sqlstore.LeaseCols, owner, now.Add(ttl).UnixMilli(), k.ProjectID, k.SessionID, from.Owner, from.Generation), k)
	if errors.Is(err, pgx.ErrNoRows) {
		if err = s.heldBy(ctx, k); errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("session %s's lease is free: %w", k, errdefs.ErrNotFound)
		}
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("take over lease from %s: %w", from.Owner, err)
	}
	return out, nil
}

// heldBy returns the *store.LeaseError naming the session's current
// holder, or pgx.ErrNoRows if the lease is free.
func (s *Store) heldBy(ctx context.Context, k store.SessionKey) error {
	return sqlstore.HeldBy(s.db.QueryRow(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = $1 AND session_id = $2 AND owner <> $3`, k.ProjectID, k.SessionID, sqlstore.FreeOwner), k)
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, k store.SessionKey, owner string) error {
	tag, err := s.db.Exec(ctx, `UPDATE leases SET owner = $4, expires_at = 0 WHERE project_id = $1 AND session_id = $2 AND owner = $3`, k.ProjectID, k.SessionID, owner, sqlstore.FreeOwner)
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
	out, err := sqlstore.ScanLease(s.db.QueryRow(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = $1 AND session_id = $2 AND owner <> $3`, k.ProjectID, k.SessionID, sqlstore.FreeOwner), k)
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease %s: %w", k, notFound(err))
	}
	return out, nil
}
