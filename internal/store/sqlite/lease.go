package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, k store.SessionKey, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidateLease(k, owner, ttl); err != nil {
		return store.Lease{}, err
	}
	var out store.Lease
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		// A released row is free (its owner matches no one, expires_at
		// is 0) and keeps the generation the next owner raises.
		out, err = sqlstore.ScanLease(tx.QueryRowContext(ctx, `
INSERT INTO leases (project_id, session_id, owner, expires_at, generation) VALUES (?, ?, ?, ?, 1)
ON CONFLICT (project_id, session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,
	generation = CASE WHEN leases.owner = excluded.owner THEN leases.generation ELSE leases.generation + 1 END
WHERE leases.owner = excluded.owner OR leases.expires_at <= ?
RETURNING `+sqlstore.LeaseCols, k.ProjectID, k.SessionID, owner, now.Add(ttl).UnixMilli(), now.UnixMilli()), k)
		if errors.Is(err, sql.ErrNoRows) {
			return heldBy(ctx, tx, k)
		}
		return err
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	return out, nil
}

// TakeOverLease implements store.Leases.
func (s *Store) TakeOverLease(ctx context.Context, k store.SessionKey, owner string, from store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidateTakeOver(k, owner, from, ttl); err != nil {
		return store.Lease{}, err
	}
	var out store.Lease
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = sqlstore.ScanLease(tx.QueryRowContext(ctx, `
UPDATE leases SET owner = ?, expires_at = ?, generation = generation + 1
WHERE project_id = ? AND session_id = ? AND owner = ? AND generation = ?
RETURNING `+sqlstore.LeaseCols, owner, now.Add(ttl).UnixMilli(), k.ProjectID, k.SessionID, from.Owner, from.Generation), k)
		if errors.Is(err, sql.ErrNoRows) {
			if err = heldBy(ctx, tx, k); errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("session %s's lease is free: %w", k, errdefs.ErrNotFound)
			}
		}
		return err
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("take over lease from %s: %w", from.Owner, err)
	}
	return out, nil
}

// heldBy returns the *store.LeaseError naming the session's current
// holder, or sql.ErrNoRows when the lease is free.
func heldBy(ctx context.Context, tx *sql.Tx, k store.SessionKey) error {
	return sqlstore.HeldBy(tx.QueryRowContext(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = ? AND session_id = ? AND owner <> ?`, k.ProjectID, k.SessionID, sqlstore.FreeOwner), k)
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, k store.SessionKey, owner string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE leases SET owner = ?, expires_at = 0 WHERE project_id = ? AND session_id = ? AND owner = ?`, sqlstore.FreeOwner, k.ProjectID, k.SessionID, owner)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		if err := heldBy(ctx, tx, k); !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		return nil // there was no lease
	})
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	return nil
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, k store.SessionKey) (store.Lease, error) {
	out, err := sqlstore.ScanLease(s.r.QueryRowContext(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = ? AND session_id = ? AND owner <> ?`, k.ProjectID, k.SessionID, sqlstore.FreeOwner), k)
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease %s: %w", k, notFound(err))
	}
	return out, nil
}
