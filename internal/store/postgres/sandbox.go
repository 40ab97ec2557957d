package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
)

const sandboxCols = `provider, id, project_id, session_id, state, labels, created_at, updated_at`

func scanSandbox(r scanner) (store.Sandbox, error) {
	var sb store.Sandbox
	var state string
	var labels []byte
	var created, updated int64
	if err := r.Scan(&sb.Provider, &sb.ID, &sb.ProjectID, &sb.SessionID, &state, &labels, &created, &updated); err != nil {
		return sb, err
	}
	sb.State = store.SandboxState(state)
	sb.CreatedAt, sb.UpdatedAt = fromMS(created), fromMS(updated)
	if err := json.Unmarshal(labels, &sb.Labels); err != nil {
		return sb, fmt.Errorf("sandbox %s/%s labels: %w", sb.Provider, sb.ID, err)
	}
	if len(sb.Labels) == 0 {
		sb.Labels = nil
	}
	return sb, nil
}

// PutSandbox implements store.Sandboxes.
func (s *Store) PutSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	if err := sb.Validate(); err != nil {
		return store.Sandbox{}, err
	}
	labels, err := json.Marshal(sb.Labels)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("put sandbox %s/%s: %w", sb.Provider, sb.ID, err)
	}
	out, err := scanSandbox(s.db.QueryRow(ctx, `
INSERT INTO sandboxes (`+sandboxCols+`) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $7)
ON CONFLICT (provider, id) DO UPDATE SET
	project_id = excluded.project_id, session_id = excluded.session_id, state = excluded.state, labels = excluded.labels,
	updated_at = excluded.updated_at
RETURNING `+sandboxCols,
		sb.Provider, sb.ID, sb.ProjectID, sb.SessionID, string(sb.State), string(labels), nowMS()))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("put sandbox %s/%s: %w", sb.Provider, sb.ID, err)
	}
	return out, nil
}

// GetSandbox implements store.Sandboxes.
func (s *Store) GetSandbox(ctx context.Context, provider, id string) (store.Sandbox, error) {
	out, err := scanSandbox(s.db.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes
WHERE provider = $1 AND id = $2`, provider, id))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %s/%s: %w", provider, id, notFound(err))
	}
	return out, nil
}

// ListSandboxes implements store.Sandboxes.
func (s *Store) ListSandboxes(ctx context.Context, q store.SandboxQuery) ([]store.Sandbox, error) {
	rows, err := s.db.Query(ctx, `SELECT `+sandboxCols+` FROM sandboxes
WHERE ($1 = '' OR provider = $1) AND ($2 = '' OR state = $2) AND ($3 = '' OR session_id = $3) AND ($4 = '' OR project_id = $4)
ORDER BY created_at, provider, id`, q.Provider, string(q.State), q.SessionID, q.ProjectID)
	out, err := collect(rows, err, scanSandbox)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// DeleteSandbox implements store.Sandboxes.
func (s *Store) DeleteSandbox(ctx context.Context, provider, id string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM sandboxes WHERE provider = $1 AND id = $2`, provider, id)
	if err := affected(tag, err); err != nil {
		return fmt.Errorf("delete sandbox %s/%s: %w", provider, id, err)
	}
	return nil
}

const secretCols = `provider, id, name, project_id, session_id, created_at`

func scanSecret(r scanner) (store.Secret, error) {
	var sec store.Secret
	var created int64
	err := r.Scan(&sec.Provider, &sec.ID, &sec.Name, &sec.ProjectID, &sec.SessionID, &created)
	sec.CreatedAt = fromMS(created)
	return sec, err
}

// PutSecret implements store.Secrets.
func (s *Store) PutSecret(ctx context.Context, sec store.Secret) (store.Secret, error) {
	if err := sec.Validate(); err != nil {
		return store.Secret{}, err
	}
	out, err := scanSecret(s.db.QueryRow(ctx, `
INSERT INTO secrets (`+secretCols+`) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (provider, id) DO UPDATE SET name = excluded.name, project_id = excluded.project_id, session_id = excluded.session_id
RETURNING `+secretCols,
		sec.Provider, sec.ID, sec.Name, sec.ProjectID, sec.SessionID, nowMS()))
	if err != nil {
		return store.Secret{}, fmt.Errorf("put secret %s/%s: %w", sec.Provider, sec.ID, err)
	}
	return out, nil
}

// ListSecrets implements store.Secrets.
func (s *Store) ListSecrets(ctx context.Context, q store.SecretQuery) ([]store.Secret, error) {
	rows, err := s.db.Query(ctx, `SELECT `+secretCols+` FROM secrets
WHERE ($1 = '' OR provider = $1) AND ($2 = '' OR session_id = $2) AND ($3 = '' OR project_id = $3)
ORDER BY created_at, provider, id`, q.Provider, q.SessionID, q.ProjectID)
	out, err := collect(rows, err, scanSecret)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret implements store.Secrets.
func (s *Store) DeleteSecret(ctx context.Context, provider, id string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM secrets WHERE provider = $1 AND id = $2`, provider, id)
	if err := affected(tag, err); err != nil {
		return fmt.Errorf("delete secret %s/%s: %w", provider, id, err)
	}
	return nil
}

// affected passes err on, or returns ErrNotFound if tag touched no row.
func affected(tag pgconn.CommandTag, err error) error {
	if err == nil && tag.RowsAffected() == 0 {
		return errdefs.ErrNotFound
	}
	return err
}
