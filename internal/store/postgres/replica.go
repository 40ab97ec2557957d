package postgres

import (
	"context"
	"fmt"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// PutReplica implements store.Replicas.
func (s *Store) PutReplica(ctx context.Context, r store.Replica) (store.Replica, error) {
	if err := r.Validate(); err != nil {
		return store.Replica{}, err
	}
	out, err := sqlstore.ScanReplica(s.db.QueryRow(ctx, `
INSERT INTO replicas (id, advertise_url, started_at, heartbeat_at, draining) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET advertise_url = excluded.advertise_url, started_at = excluded.started_at,
	heartbeat_at = excluded.heartbeat_at, draining = excluded.draining
RETURNING `+sqlstore.ReplicaCols, r.ID, r.AdvertiseURL, sqlstore.MS(r.StartedAt), sqlstore.MS(r.HeartbeatAt), r.Draining))
	if err != nil {
		return store.Replica{}, fmt.Errorf("put replica %s: %w", r.ID, err)
	}
	return out, nil
}

// GetReplica implements store.Replicas.
func (s *Store) GetReplica(ctx context.Context, id string) (store.Replica, error) {
	out, err := sqlstore.ScanReplica(s.db.QueryRow(ctx, `SELECT `+sqlstore.ReplicaCols+` FROM replicas WHERE id = $1`, id))
	if err != nil {
		return store.Replica{}, fmt.Errorf("get replica %s: %w", id, notFound(err))
	}
	return out, nil
}

// ListReplicas implements store.Replicas.
func (s *Store) ListReplicas(ctx context.Context) ([]store.Replica, error) {
	rows, err := s.db.Query(ctx, `SELECT `+sqlstore.ReplicaCols+` FROM replicas ORDER BY id`)
	out, err := collect(rows, err, sqlstore.ScanReplica)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}

// DeleteReplica implements store.Replicas.
func (s *Store) DeleteReplica(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM replicas WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete replica %s: %w", id, err)
	}
	return nil
}
