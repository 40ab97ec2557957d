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
var (
	// sqlBeginTurn: the session update (which also locks the session
	// row) and the insert in one statement; no row when the session does
	// not exist or the write is fenced ($13).
	sqlBeginTurn = `
WITH ` + fenceCTE("$1", "$12") + `, s AS (
	UPDATE sessions SET last_turn_index = GREATEST(last_turn_index, $2), updated_at = $10
	WHERE project_id = $12 AND id = $1 AND NOT EXISTS (SELECT FROM fence WHERE generation > $13)
	RETURNING project_id, id
)
INSERT INTO turns (` + sqlstore.TurnCols + `)
SELECT s.project_id, s.id, $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, 0, 0, 0, '', '', $11 FROM s
RETURNING ` + sqlstore.TurnCols
	// sqlEndTurn: no row when the turn is missing or already ended, or
	// the write is fenced ($15).
	sqlEndTurn = `WITH ` + fenceCTE("$1", "$14") + `
UPDATE turns SET
	status = $3, ended_at = $4, input_tokens = $5, output_tokens = $6, total_tokens = $7, cost = $8,
	stop_reason = $9, error = $10, agent_session_id = $11, sandbox_provider = $12, sandbox_id = $13
WHERE project_id = $14 AND session_id = $1 AND turn_index = $2 AND status IN ('running', 'paused')
	AND NOT EXISTS (SELECT FROM fence WHERE generation > $15)
RETURNING ` + sqlstore.TurnCols
	// sqlEndRefused tells why sqlEndTurn wrote no row, in one row: the
	// turn's status (NULL: no such turn) and the session's lease
	// generation (NULL: never leased).
	sqlEndRefused = `SELECT t.status, l.generation, l.owner, l.expires_at FROM (SELECT 1) one
LEFT JOIN turns t ON t.project_id = $1 AND t.session_id = $2 AND t.turn_index = $3
LEFT JOIN leases l ON l.project_id = $1 AND l.session_id = $2`
)

func beginArgs(t store.Turn) []any {
	return []any{t.SessionID, t.Index, t.TurnID, t.Harness, t.AgentSessionID, t.SandboxProvider,
		t.SandboxID, string(store.TurnRunning), sqlstore.MS(t.StartedAt), sqlstore.NowMS(), t.Owner, t.ProjectID,
		fenceArg(t.Generation)}
}

func endArgs(t store.Turn) []any {
	return []any{t.SessionID, t.Index,
		string(t.Status), sqlstore.MS(t.EndedAt), t.Usage.Input, t.Usage.Output, t.Usage.Total, t.Usage.Cost,
		t.StopReason, t.Error, t.AgentSessionID, t.SandboxProvider, t.SandboxID, t.ProjectID, fenceArg(t.Generation)}
}

// endRefused reads sqlEndRefused's row as the error of t's refused
// outcome: fenced, already ended (ErrConflict) or no such turn
// (ErrNotFound).
func endRefused(r pgx.Row, t store.Turn) error {
	var status, owner *string
	var gen, expires *int64
	if err := r.Scan(&status, &gen, &owner, &expires); err != nil {
		return err
	}
	if gen != nil {
		l := store.Lease{ProjectID: t.ProjectID, SessionID: t.SessionID, Owner: *owner, Expires: sqlstore.FromMS(*expires), Generation: *gen}
		if err := store.Fenced(t.Key(), t.Generation, l); err != nil {
			return err
		}
	}
	if status == nil {
		return errdefs.ErrNotFound
	}
	return fmt.Errorf("already %s: %w", *status, errdefs.ErrConflict)
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
		return store.Turn{}, fmt.Errorf("begin turn %s/%d: %w", t.Key(), t.Index, s.fencedOr(ctx, t.Key(), t.Generation, err))
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
		// Tell a fenced write, a missing turn and one that has already
		// ended apart; an ended turn never runs again and a generation
		// only grows, so no transaction is needed.
		err = endRefused(s.db.QueryRow(ctx, sqlEndRefused, t.ProjectID, t.SessionID, t.Index), t)
	}
	return store.Turn{}, fmt.Errorf("end turn %s/%d: %w", t.Key(), t.Index, err)
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
