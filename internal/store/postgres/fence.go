package postgres

import (
	"context"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// fenceCTE is the CTE "fence" every fenced statement starts with: the
// session's lease row, read and share-locked until the write commits
// (session and project are the statement's placeholders). The lock is
// the fence: a takeover or a change of owner updates the row, so it
// waits for the writes that passed the check to commit, and a write that
// waits on a takeover reads the raised generation once it commits and
// refuses itself. MATERIALIZED keeps the planner from pushing the
// caller's generation test into the scan, which would lock no row.
func fenceCTE(session, project string) string {
	return `fence AS MATERIALIZED (
	SELECT generation FROM leases WHERE project_id = ` + project + ` AND session_id = ` + session + ` FOR SHARE
)`
}

// fenceArg is a writer's generation as the statements compare it: an
// unfenced write (0) passes every lease.
func fenceArg(gen int64) int64 {
	if gen <= 0 {
		return math.MaxInt64
	}
	return gen
}

// fencedOr returns the *store.FencedError refusing a write of generation
// gen to session k when err (a statement that wrote no row) was the fence
// refusing it, else err with no rows as errdefs.ErrNotFound. A lease
// generation only grows, so a lease read after the refusal tells it.
func (s *Store) fencedOr(ctx context.Context, k store.SessionKey, gen int64, err error) error {
	if gen <= 0 || !errors.Is(err, pgx.ErrNoRows) {
		return notFound(err)
	}
	l, lerr := sqlstore.ScanLease(s.db.QueryRow(ctx, `SELECT `+sqlstore.LeaseCols+` FROM leases WHERE project_id = $1 AND session_id = $2`, k.ProjectID, k.SessionID), k)
	if lerr != nil {
		return notFound(err) // never leased: not fenced
	}
	if f := store.Fenced(k, gen, l); f != nil {
		return f
	}
	return notFound(err)
}
