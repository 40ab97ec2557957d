package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// PutSandbox implements store.Sandboxes.
func (s *Store) PutSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	if err := sb.Validate(); err != nil {
		return store.Sandbox{}, err
	}
	labels, err := json.Marshal(sb.Labels)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("put sandbox %s/%s: %w", sb.Provider, sb.ID, err)
	}
	t := sqlstore.NowMS()
	out, err := sqlstore.ScanSandbox(s.w.QueryRowContext(ctx, `
INSERT INTO sandboxes (`+sqlstore.SandboxCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (provider, id) DO UPDATE SET
	project_id = excluded.project_id, session_id = excluded.session_id, state = excluded.state, labels = excluded.labels,
	updated_at = excluded.updated_at
RETURNING `+sqlstore.SandboxCols,
		sb.Provider, sb.ID, sb.ProjectID, sb.SessionID, string(sb.State), string(labels), t, t))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("put sandbox %s/%s: %w", sb.Provider, sb.ID, err)
	}
	return out, nil
}

// GetSandbox implements store.Sandboxes.
func (s *Store) GetSandbox(ctx context.Context, provider, id string) (store.Sandbox, error) {
	out, err := sqlstore.ScanSandbox(s.r.QueryRowContext(ctx, `SELECT `+sqlstore.SandboxCols+` FROM sandboxes
WHERE provider = ? AND id = ?`, provider, id))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %s/%s: %w", provider, id, notFound(err))
	}
	return out, nil
}

// ListSandboxes implements store.Sandboxes.
func (s *Store) ListSandboxes(ctx context.Context, q store.SandboxQuery) ([]store.Sandbox, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+sqlstore.SandboxCols+` FROM sandboxes
WHERE (?1 = '' OR provider = ?1) AND (?2 = '' OR state = ?2) AND (?3 = '' OR session_id = ?3) AND (?4 = '' OR project_id = ?4)
ORDER BY created_at, provider, id`, q.Provider, string(q.State), q.SessionID, q.ProjectID)
	out, err := collect(rows, err, sqlstore.ScanSandbox)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// DeleteSandbox implements store.Sandboxes.
func (s *Store) DeleteSandbox(ctx context.Context, provider, id string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM sandboxes WHERE provider = ? AND id = ?`, provider, id)
	if err == nil {
		err = affected(res)
	}
	if err != nil {
		return fmt.Errorf("delete sandbox %s/%s: %w", provider, id, err)
	}
	return nil
}

// PutSecret implements store.Secrets.
func (s *Store) PutSecret(ctx context.Context, sec store.Secret) (store.Secret, error) {
	if err := sec.Validate(); err != nil {
		return store.Secret{}, err
	}
	out, err := sqlstore.ScanSecret(s.w.QueryRowContext(ctx, `
INSERT INTO secrets (`+sqlstore.SecretCols+`) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (provider, id) DO UPDATE SET name = excluded.name, project_id = excluded.project_id, session_id = excluded.session_id
RETURNING `+sqlstore.SecretCols,
		sec.Provider, sec.ID, sec.Name, sec.ProjectID, sec.SessionID, sqlstore.NowMS()))
	if err != nil {
		return store.Secret{}, fmt.Errorf("put secret %s/%s: %w", sec.Provider, sec.ID, err)
	}
	return out, nil
}

// ListSecrets implements store.Secrets.
func (s *Store) ListSecrets(ctx context.Context, q store.SecretQuery) ([]store.Secret, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+sqlstore.SecretCols+` FROM secrets
WHERE (?1 = '' OR provider = ?1) AND (?2 = '' OR session_id = ?2) AND (?3 = '' OR project_id = ?3)
ORDER BY created_at, provider, id`, q.Provider, q.SessionID, q.ProjectID)
	out, err := collect(rows, err, sqlstore.ScanSecret)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret implements store.Secrets.
func (s *Store) DeleteSecret(ctx context.Context, provider, id string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM secrets WHERE provider = ? AND id = ?`, provider, id)
	if err == nil {
		err = affected(res)
	}
	if err != nil {
		return fmt.Errorf("delete secret %s/%s: %w", provider, id, err)
	}
	return nil
}

// affected returns ErrNotFound if res touched no row.
func affected(res interface{ RowsAffected() (int64, error) }) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return errdefs.ErrNotFound
	}
	return nil
}
