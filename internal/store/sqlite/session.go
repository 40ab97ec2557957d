package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// PutSession implements store.Sessions.
func (s *Store) PutSession(ctx context.Context, in store.Session) (store.Session, error) {
	if err := in.Validate(); err != nil {
		return store.Session{}, err
	}
	t := sqlstore.NowMS()
	var out store.Session
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.fence(ctx, tx, in.Key(), in.Generation); err != nil {
			return err
		}
		var err error
		out, err = sqlstore.ScanSession(tx.QueryRowContext(ctx, `
INSERT INTO sessions (id, project_id, harness, status, sandbox_provider, sandbox_id,
	agent_session_id, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (project_id, id) DO UPDATE SET
	harness = excluded.harness, status = excluded.status,
	sandbox_provider = excluded.sandbox_provider, sandbox_id = excluded.sandbox_id,
	agent_session_id = excluded.agent_session_id, updated_at = excluded.updated_at
RETURNING `+sqlstore.SessionCols,
			in.ID, in.ProjectID, in.Harness, string(in.Status), in.SandboxProvider, in.SandboxID,
			in.AgentSessionID, t, t))
		return err
	})
	if err != nil {
		return store.Session{}, fmt.Errorf("put session %s: %w", in.Key(), err)
	}
	return out, nil
}

// GetSession implements store.Sessions.
func (s *Store) GetSession(ctx context.Context, k store.SessionKey) (store.Session, error) {
	out, err := sqlstore.ScanSession(s.r.QueryRowContext(ctx, `SELECT `+sqlstore.SessionCols+` FROM sessions WHERE project_id = ? AND id = ?`, k.ProjectID, k.SessionID))
	if err != nil {
		return store.Session{}, fmt.Errorf("get session %s: %w", k, notFound(err))
	}
	return out, nil
}

// ListSessions implements store.Sessions.
func (s *Store) ListSessions(ctx context.Context, q store.SessionQuery) ([]store.Session, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+sqlstore.SessionCols+` FROM sessions
WHERE (?1 = '' OR project_id = ?1) AND (?2 = '' OR status = ?2) AND (?4 = '' OR id = ?4)
ORDER BY updated_at DESC, id, project_id LIMIT ?3`, q.ProjectID, string(q.Status), limit, q.ID)
	out, err := collect(rows, err, sqlstore.ScanSession)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}
