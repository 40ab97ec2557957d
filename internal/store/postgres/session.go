package postgres

import (
	"context"
	"fmt"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// PutSession implements store.Sessions, in one statement: a fenced
// write (in.Generation, fenceCTE) inserts or updates no row.
func (s *Store) PutSession(ctx context.Context, in store.Session) (store.Session, error) {
	if err := in.Validate(); err != nil {
		return store.Session{}, err
	}
	out, err := sqlstore.ScanSession(s.db.QueryRow(ctx, `
WITH `+fenceCTE("$1", "$2")+`
INSERT INTO sessions (id, project_id, harness, status, sandbox_provider, sandbox_id,
	agent_session_id, created_at, updated_at)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::bigint, $8::bigint
WHERE NOT EXISTS (SELECT FROM fence WHERE generation > $9)
ON CONFLICT (project_id, id) DO UPDATE SET
	harness = excluded.harness, status = excluded.status,
	sandbox_provider = excluded.sandbox_provider, sandbox_id = excluded.sandbox_id,
	agent_session_id = excluded.agent_session_id, updated_at = excluded.updated_at
RETURNING `+sqlstore.SessionCols,
		in.ID, in.ProjectID, in.Harness, string(in.Status), in.SandboxProvider, in.SandboxID,
		in.AgentSessionID, sqlstore.NowMS(), fenceArg(in.Generation)))
	if err != nil {
		return store.Session{}, fmt.Errorf("put session %s: %w", in.Key(), s.fencedOr(ctx, in.Key(), in.Generation, err))
	}
	return out, nil
}

// GetSession implements store.Sessions.
func (s *Store) GetSession(ctx context.Context, k store.SessionKey) (store.Session, error) {
	out, err := sqlstore.ScanSession(s.db.QueryRow(ctx, `SELECT `+sqlstore.SessionCols+` FROM sessions WHERE project_id = $1 AND id = $2`, k.ProjectID, k.SessionID))
	if err != nil {
		return store.Session{}, fmt.Errorf("get session %s: %w", k, notFound(err))
	}
	return out, nil
}

// ListSessions implements store.Sessions.
func (s *Store) ListSessions(ctx context.Context, q store.SessionQuery) ([]store.Session, error) {
	rows, err := s.db.Query(ctx, `SELECT `+sqlstore.SessionCols+` FROM sessions
WHERE ($1 = '' OR project_id = $1) AND ($2 = '' OR status = $2) AND ($4 = '' OR id = $4)
ORDER BY updated_at DESC, id, project_id LIMIT $3`, q.ProjectID, string(q.Status), limit(q.Limit), q.ID)
	out, err := collect(rows, err, sqlstore.ScanSession)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// limit is n as a LIMIT argument: NULL (no limit) when n <= 0.
func limit(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}
