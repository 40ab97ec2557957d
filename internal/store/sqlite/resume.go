package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

var _ store.Resumes = (*Store)(nil)

// PutResume implements store.Resumes.
func (s *Store) PutResume(ctx context.Context, r store.Resume) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE project_id = ? AND id = ?`, r.ProjectID, r.SessionID).Scan(&one); err != nil {
			return notFound(err)
		}
		_, err := tx.ExecContext(ctx, `
INSERT INTO resumes (project_id, session_id, request, secrets, created_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (project_id, session_id) DO UPDATE SET request = excluded.request, secrets = excluded.secrets, created_at = excluded.created_at`,
			r.ProjectID, r.SessionID, r.Request, r.Secrets, sqlstore.MS(r.CreatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("put resume %s: %w", r.Key(), err)
	}
	return nil
}

// GetResume implements store.Resumes.
func (s *Store) GetResume(ctx context.Context, k store.SessionKey) (store.Resume, error) {
	out, err := sqlstore.ScanResume(s.r.QueryRowContext(ctx, `SELECT `+sqlstore.ResumeCols+` FROM resumes WHERE project_id = ? AND session_id = ?`, k.ProjectID, k.SessionID), k)
	if err != nil {
		return store.Resume{}, fmt.Errorf("get resume %s: %w", k, notFound(err))
	}
	return out, nil
}

// DeleteResume implements store.Resumes.
func (s *Store) DeleteResume(ctx context.Context, k store.SessionKey) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM resumes WHERE project_id = ? AND session_id = ?`, k.ProjectID, k.SessionID)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete resume %s: %w", k, err)
	}
	return nil
}
