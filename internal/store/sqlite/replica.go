package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// PutReplica implements store.Replicas.
func (s *Store) PutReplica(ctx context.Context, r store.Replica) (store.Replica, error) {
	if err := r.Validate(); err != nil {
		return store.Replica{}, err
	}
	var out store.Replica
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = sqlstore.ScanReplica(tx.QueryRowContext(ctx, `
INSERT INTO replicas (id, advertise_url, started_at, heartbeat_at, draining) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET advertise_url = excluded.advertise_url, started_at = excluded.started_at,
	heartbeat_at = excluded.heartbeat_at, draining = excluded.draining
RETURNING `+sqlstore.ReplicaCols, r.ID, r.AdvertiseURL, sqlstore.MS(r.StartedAt), sqlstore.MS(r.HeartbeatAt), r.Draining))
		return err
	})
	if err != nil {
		return store.Replica{}, fmt.Errorf("put replica %s: %w", r.ID, err)
	}
	return out, nil
}

// GetReplica implements store.Replicas.
func (s *Store) GetReplica(ctx context.Context, id string) (store.Replica, error) {
	out, err := sqlstore.ScanReplica(s.r.QueryRowContext(ctx, `SELECT `+sqlstore.ReplicaCols+` FROM replicas WHERE id = ?`, id))
	if err != nil {
		return store.Replica{}, fmt.Errorf("get replica %s: %w", id, notFound(err))
	}
	return out, nil
}

// ListReplicas implements store.Replicas.
func (s *Store) ListReplicas(ctx context.Context) ([]store.Replica, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+sqlstore.ReplicaCols+` FROM replicas ORDER BY id`)
	out, err := collect(rows, err, sqlstore.ScanReplica)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}

// DeleteReplica implements store.Replicas.
func (s *Store) DeleteReplica(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM replicas WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete replica %s: %w", id, err)
	}
	return nil
}
