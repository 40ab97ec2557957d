package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/store"
)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, sessionID, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidateLease(sessionID, owner, ttl); err != nil {
		return store.Lease{}, err
	}
	for {
		out := store.Lease{SessionID: sessionID}
		var expires int64
		err := s.pool.QueryRow(ctx, `
INSERT INTO leases (session_id, owner, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE leases.owner = excluded.owner OR leases.expires_at <= $4
RETURNING owner, expires_at`, sessionID, owner, now.Add(ttl).UnixMilli(), now.UnixMilli()).Scan(&out.Owner, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			err = s.heldBy(ctx, sessionID)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // released since: try again
			}
		}
		if err != nil {
			return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
		}
		out.Expires = fromMS(expires)
		return out, nil
	}
}

// heldBy returns the *store.LeaseError naming the session's current
// holder, or pgx.ErrNoRows if there is none.
func (s *Store) heldBy(ctx context.Context, sessionID string) error {
	e := &store.LeaseError{SessionID: sessionID}
	var expires int64
	if err := s.pool.QueryRow(ctx, `SELECT owner, expires_at FROM leases WHERE session_id = $1`, sessionID).
		Scan(&e.Owner, &expires); err != nil {
		return err
	}
	e.Expires = fromMS(expires)
	return e
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, sessionID, owner string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM leases WHERE session_id = $1 AND owner = $2`, sessionID, owner)
	if err == nil && tag.RowsAffected() == 0 {
		if err = s.heldBy(ctx, sessionID); errors.Is(err, pgx.ErrNoRows) {
			err = nil // there was no lease
		}
	}
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	return nil
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, sessionID string) (store.Lease, error) {
	out := store.Lease{SessionID: sessionID}
	var expires int64
	err := s.pool.QueryRow(ctx, `SELECT owner, expires_at FROM leases WHERE session_id = $1`, sessionID).
		Scan(&out.Owner, &expires)
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease %s: %w", sessionID, notFound(err))
	}
	out.Expires = fromMS(expires)
	return out, nil
}
