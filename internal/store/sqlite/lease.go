package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

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
		out, err = sqlstore.ScanLease(tx.QueryRowContext(ctx, `
INSERT INTO leases (project_id, session_id, owner, expires_at) VALUES (?, ?, ?, ?)
ON CONFLICT (project_id, session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
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

// heldBy returns the *store.LeaseError naming the session's current holder.
func heldBy(ctx context.Context, tx *sql.Tx, k store.SessionKey) error {
	return sqlstore.HeldBy(tx.QueryRowContext(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = ? AND session_id = ?`, k.ProjectID, k.SessionID), k)
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, k store.SessionKey, owner string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE project_id = ? AND session_id = ? AND owner = ?`, k.ProjectID, k.SessionID, owner)
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
	out, err := sqlstore.ScanLease(s.r.QueryRowContext(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = ? AND session_id = ?`, k.ProjectID, k.SessionID), k)
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease %s: %w", k, notFound(err))
	}
	return out, nil
}
