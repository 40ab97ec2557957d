package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// The turn ledger's statements, shared with the TurnWriter's batches.
const (
	// sqlBeginTurn: the session update (which also locks the session
	// row) and the insert in one statement; no row when the session does
	// not exist.
	sqlBeginTurn = `
WITH s AS (
	UPDATE sessions SET last_turn_index = GREATEST(last_turn_index, $2), updated_at = $10
	WHERE project_id = $12 AND id = $1 RETURNING project_id, id
)
INSERT INTO turns (` + sqlstore.TurnCols + `)
SELECT s.project_id, s.id, $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, 0, 0, 0, '', '', $11 FROM s
RETURNING ` + sqlstore.TurnCols
	// sqlEndTurn: no row when the turn is missing or already ended.
	sqlEndTurn = `UPDATE turns SET
	status = $3, ended_at = $4, input_tokens = $5, output_tokens = $6, total_tokens = $7, cost = $8,
	stop_reason = $9, error = $10, agent_session_id = $11, sandbox_provider = $12, sandbox_id = $13
WHERE project_id = $14 AND session_id = $1 AND turn_index = $2 AND status IN ('running', 'paused')
RETURNING ` + sqlstore.TurnCols
	sqlTurnStatus = `SELECT status FROM turns WHERE project_id = $1 AND session_id = $2 AND turn_index = $3`
)

func beginArgs(t store.Turn) []any {
	return []any{t.SessionID, t.Index, t.TurnID, t.Harness, t.AgentSessionID, t.SandboxProvider,
		t.SandboxID, string(store.TurnRunning), sqlstore.MS(t.StartedAt), sqlstore.NowMS(), t.Owner, t.ProjectID}
}

func endArgs(t store.Turn) []any {
	return []any{t.SessionID, t.Index,
		string(t.Status), sqlstore.MS(t.EndedAt), t.Usage.Input, t.Usage.Output, t.Usage.Total, t.Usage.Cost,
		t.StopReason, t.Error, t.AgentSessionID, t.SandboxProvider, t.SandboxID, t.ProjectID}
}

// BeginTurn implements store.Turns, in one statement (sqlBeginTurn).
func (s *Store) BeginTurn(ctx context.Context, t store.Turn) (store.Turn, error) {
	if err := t.ValidateBegin(); err != nil {
		return store.Turn{}, err
	}
	out, err := sqlstore.ScanTurn(s.db.QueryRow(ctx, sqlBeginTurn, beginArgs(t)...))
	if isUnique(err) {
		err = errdefs.ErrConflict
	}
	if err != nil {
		return store.Turn{}, fmt.Errorf("begin turn %s/%d: %w", t.Key(), t.Index, notFound(err))
	}
	return out, nil
}

// EndTurn implements store.Turns.
func (s *Store) EndTurn(ctx context.Context, t store.Turn) (store.Turn, error) {
	if err := t.ValidateEnd(); err != nil {
		return store.Turn{}, err
	}
	out, err := sqlstore.ScanTurn(s.db.QueryRow(ctx, sqlEndTurn, endArgs(t)...))
	if err == nil {
		return out, nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// Tell a missing turn from one that has already ended; an ended
		// turn never runs again, so no transaction is needed.
		var status string
		err = s.db.QueryRow(ctx, sqlTurnStatus, t.ProjectID, t.SessionID, t.Index).Scan(&status)
		if err == nil {
			err = fmt.Errorf("already %s: %w", status, errdefs.ErrConflict)
		}
	}
	return store.Turn{}, fmt.Errorf("end turn %s/%d: %w", t.Key(), t.Index, notFound(err))
}

// GetTurn implements store.Turns.
func (s *Store) GetTurn(ctx context.Context, k store.SessionKey, index int) (store.Turn, error) {
	out, err := sqlstore.ScanTurn(s.db.QueryRow(ctx, `SELECT `+sqlstore.TurnCols+` FROM turns
WHERE project_id = $1 AND session_id = $2 AND turn_index = $3`, k.ProjectID, k.SessionID, index))
	if err != nil {
		return store.Turn{}, fmt.Errorf("get turn %s/%d: %w", k, index, notFound(err))
	}
	return out, nil
}

// ListTurns implements store.Turns.
func (s *Store) ListTurns(ctx context.Context, k store.SessionKey) ([]store.Turn, error) {
	rows, err := s.db.Query(ctx, `SELECT `+sqlstore.TurnCols+` FROM turns
WHERE project_id = $1 AND session_id = $2 ORDER BY turn_index`, k.ProjectID, k.SessionID)
	out, err := collect(rows, err, sqlstore.ScanTurn)
	if err == nil && len(out) == 0 {
		err = s.sessionExists(ctx, k)
	}
	if err != nil {
		return nil, fmt.Errorf("list turns %s: %w", k, err)
	}
	return out, nil
}

// InterruptTurns implements store.Turns.
func (s *Store) InterruptTurns(ctx context.Context, owner string, at time.Time) (int, error) {
	tag, err := s.db.Exec(ctx, `UPDATE turns SET status = 'interrupted', ended_at = $2
WHERE owner = $1 AND status = 'running'`, owner, sqlstore.MS(at))
	if err != nil {
		return 0, fmt.Errorf("interrupt turns of %s: %w", owner, err)
	}
	return int(tag.RowsAffected()), nil
}

// sessionExists returns nil if the session exists, else ErrNotFound.
func (s *Store) sessionExists(ctx context.Context, k store.SessionKey) error {
	var one int
	return notFound(s.db.QueryRow(ctx, `SELECT 1 FROM sessions WHERE project_id = $1 AND id = $2`, k.ProjectID, k.SessionID).Scan(&one))
}
