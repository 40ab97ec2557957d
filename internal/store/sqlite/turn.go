package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// BeginTurn implements store.Turns.
func (s *Store) BeginTurn(ctx context.Context, t store.Turn) (store.Turn, error) {
	if err := t.ValidateBegin(); err != nil {
		return store.Turn{}, err
	}
	var out store.Turn
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.beginTurn(ctx, tx, t)
		return err
	})
	if err != nil {
		return store.Turn{}, fmt.Errorf("begin turn %s/%d: %w", t.Key(), t.Index, err)
	}
	return out, nil
}

// EndTurn implements store.Turns.
func (s *Store) EndTurn(ctx context.Context, t store.Turn) (store.Turn, error) {
	if err := t.ValidateEnd(); err != nil {
		return store.Turn{}, err
	}
	var out store.Turn
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.endTurn(ctx, tx, t)
		return err
	})
	if err != nil {
		return store.Turn{}, fmt.Errorf("end turn %s/%d: %w", t.Key(), t.Index, err)
	}
	return out, nil
}

// beginTurn records t as running in tx.
func (s *Store) beginTurn(ctx context.Context, tx *sql.Tx, t store.Turn) (store.Turn, error) {
	var id string
	err := tx.StmtContext(ctx, s.stmts.beginSession).QueryRowContext(ctx, t.Index, sqlstore.NowMS(), t.ProjectID, t.SessionID, fenceArg(t.Generation)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Turn{}, s.refusal(ctx, tx, t.Key(), t.Generation, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Turn{}, err
	}
	out, err := sqlstore.ScanTurn(tx.StmtContext(ctx, s.stmts.insertTurn).QueryRowContext(ctx,
		t.ProjectID, t.SessionID, t.Index, t.TurnID, t.Harness, t.AgentSessionID, t.SandboxProvider,
		t.SandboxID, string(store.TurnRunning), sqlstore.MS(t.StartedAt), t.Owner))
	if isUnique(err) {
		return store.Turn{}, errdefs.ErrConflict
	}
	return out, err
}

// endTurn records t's outcome in tx.
func (s *Store) endTurn(ctx context.Context, tx *sql.Tx, t store.Turn) (store.Turn, error) {
	out, err := sqlstore.ScanTurn(tx.StmtContext(ctx, s.stmts.endTurn).QueryRowContext(ctx,
		string(t.Status), sqlstore.MS(t.EndedAt), t.Usage.Input, t.Usage.Output, t.Usage.Total, t.Usage.Cost,
		t.StopReason, t.Error, t.AgentSessionID, t.SandboxProvider, t.SandboxID,
		t.ProjectID, t.SessionID, t.Index, fenceArg(t.Generation)))
	if !errors.Is(err, sql.ErrNoRows) {
		return out, err
	}
	if err := s.fence(ctx, tx, t.Key(), t.Generation); err != nil {
		return store.Turn{}, err
	}
	// Tell a missing turn from one that has already ended.
	var status string
	err = tx.QueryRowContext(ctx, `SELECT status FROM turns WHERE project_id = ? AND session_id = ? AND turn_index = ?`,
		t.ProjectID, t.SessionID, t.Index).Scan(&status)
	if err != nil {
		return store.Turn{}, notFound(err)
	}
	return store.Turn{}, fmt.Errorf("already %s: %w", status, errdefs.ErrConflict)
}

// The turn ledger's statements, prepared once on the write connection:
// parsing the SQL cost more than running it.
var (
	sqlBeginSession = `UPDATE sessions
SET last_turn_index = max(last_turn_index, ?), updated_at = ? WHERE project_id = ? AND id = ? AND ` + fencedBy("?3", "?4", "?5") + ` RETURNING id`
	// sqlInsertTurnRow writes no row when fenced (the project, session and
	// generation follow the row's values).
	sqlInsertTurnRow = `INSERT INTO turns (` + sqlstore.TurnCols + `)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE ` + fencedBy("?", "?", "?")
	sqlInsertTurn = `INSERT INTO turns (` + sqlstore.TurnCols + `)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 0, 0, '', '', ?) RETURNING ` + sqlstore.TurnCols
	sqlEndTurn = `UPDATE turns SET
	status = ?, ended_at = ?, input_tokens = ?, output_tokens = ?, total_tokens = ?, cost = ?,
	stop_reason = ?, error = ?, agent_session_id = ?, sandbox_provider = ?, sandbox_id = ?
WHERE project_id = ? AND session_id = ? AND turn_index = ? AND status IN ('running', 'paused') AND ` + fencedBy("?12", "?13", "?15") + `
RETURNING ` + sqlstore.TurnCols
)

// GetTurn implements store.Turns.
func (s *Store) GetTurn(ctx context.Context, k store.SessionKey, index int) (store.Turn, error) {
	out, err := sqlstore.ScanTurn(s.r.QueryRowContext(ctx, `SELECT `+sqlstore.TurnCols+` FROM turns
WHERE project_id = ? AND session_id = ? AND turn_index = ?`, k.ProjectID, k.SessionID, index))
	if err != nil {
		return store.Turn{}, fmt.Errorf("get turn %s/%d: %w", k, index, notFound(err))
	}
	return out, nil
}

// ListTurns implements store.Turns.
func (s *Store) ListTurns(ctx context.Context, k store.SessionKey) ([]store.Turn, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+sqlstore.TurnCols+` FROM turns
WHERE project_id = ? AND session_id = ? ORDER BY turn_index`, k.ProjectID, k.SessionID)
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
	res, err := s.w.ExecContext(ctx, `UPDATE turns SET status = 'interrupted', ended_at = ?
WHERE owner = ? AND status = 'running'`, sqlstore.MS(at), owner)
	if err != nil {
		return 0, fmt.Errorf("interrupt turns of %s: %w", owner, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("interrupt turns of %s: %w", owner, err)
	}
	return int(n), nil
}

// sessionExists returns nil if the session exists, else ErrNotFound.
func (s *Store) sessionExists(ctx context.Context, k store.SessionKey) error {
	var one int
	return notFound(s.r.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE project_id = ? AND id = ?`, k.ProjectID, k.SessionID).Scan(&one))
}
