package postgres

import (
	"context"
	"fmt"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

var _ store.Resumes = (*Store)(nil)

// PutResume implements store.Resumes.
func (s *Store) PutResume(ctx context.Context, r store.Resume) error {
	// One statement: the row is written only while its session exists.
	tag, err := s.db.Exec(ctx, `
INSERT INTO resumes (project_id, session_id, request, secrets, created_at)
SELECT project_id, id, $3, $4, $5 FROM sessions WHERE project_id = $1 AND id = $2
ON CONFLICT (project_id, session_id) DO UPDATE SET request = excluded.request, secrets = excluded.secrets, created_at = excluded.created_at`,
		r.ProjectID, r.SessionID, r.Request, r.Secrets, sqlstore.MS(r.CreatedAt))
	if err == nil && tag.RowsAffected() == 0 {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("put resume %s: %w", r.Key(), err)
	}
	return nil
}

// GetResume implements store.Resumes.
func (s *Store) GetResume(ctx context.Context, k store.SessionKey) (store.Resume, error) {
	out, err := sqlstore.ScanResume(s.db.QueryRow(ctx, `SELECT `+sqlstore.ResumeCols+` FROM resumes WHERE project_id = $1 AND session_id = $2`, k.ProjectID, k.SessionID), k)
	if err != nil {
		return store.Resume{}, fmt.Errorf("get resume %s: %w", k, notFound(err))
	}
	return out, nil
}

// DeleteResume implements store.Resumes.
func (s *Store) DeleteResume(ctx context.Context, k store.SessionKey) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM resumes WHERE project_id = $1 AND session_id = $2`, k.ProjectID, k.SessionID); err != nil {
		return fmt.Errorf("delete resume %s: %w", k, err)
	}
	return nil
}
