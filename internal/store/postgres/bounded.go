package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentrunner/runner/internal/errdefs"
)

// bounded is the pool with every call under a deadline, the statement
// timeout: a server that keeps the connection open but stops answering
// answers no server-side statement_timeout either, so only the client's
// deadline ends the wait. A call that runs out of it fails classed
// ErrUnavailable, naming the setting.
type bounded struct {
	pool    *pgxpool.Pool
	timeout time.Duration
}

// errStalled is the cause of a call's deadline.
type errStalled struct{ timeout time.Duration }

func (e errStalled) Error() string {
	return fmt.Sprintf("PostgreSQL did not answer within %s (AGENTA_RUNNER_DATABASE_STATEMENT_TIMEOUT_MS)", e.timeout)
}

func (b bounded) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, b.timeout, errStalled{b.timeout})
}

// stalled adds the deadline's cause to err when the call ran out of it.
func stalled(ctx context.Context, err error) error {
	var cause errStalled
	if err == nil || !errors.As(context.Cause(ctx), &cause) {
		return err
	}
	return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("%w: %w", cause, err))
}

func (b bounded) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	tag, err := b.pool.Exec(ctx, sql, args...)
	return tag, stalled(ctx, err)
}

func (b bounded) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	ctx, cancel := b.bound(ctx)
	return boundedRow{row: b.pool.QueryRow(ctx, sql, args...), ctx: ctx, cancel: cancel}
}

func (b bounded) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, cancel := b.bound(ctx)
	rows, err := b.pool.Query(ctx, sql, args...)
	if err != nil {
		cancel()
		return nil, stalled(ctx, err)
	}
	return boundedRows{Rows: rows, ctx: ctx, cancel: cancel}, nil
}

// inTx runs fn in a transaction, the whole of it under one deadline, and
// commits it if fn returns nil.
func (b bounded) inTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return stalled(ctx, err)
	}
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback(ctx)
		return stalled(ctx, err)
	}
	return stalled(ctx, tx.Commit(ctx))
}

type boundedRow struct {
	row    pgx.Row
	ctx    context.Context
	cancel context.CancelFunc
}

func (r boundedRow) Scan(dst ...any) error {
	defer r.cancel()
	return stalled(r.ctx, r.row.Scan(dst...))
}

type boundedRows struct {
	pgx.Rows
	ctx    context.Context
	cancel context.CancelFunc
}

func (r boundedRows) Close() {
	r.Rows.Close()
	r.cancel()
}

func (r boundedRows) Err() error { return stalled(r.ctx, r.Rows.Err()) }

// sendBatch sends b in one round trip, run by the server as one implicit
// transaction (an error in any statement rolls back every one), and
// hands its results to read, in order.
func (b bounded) sendBatch(ctx context.Context, batch *pgx.Batch, read func(pgx.BatchResults) error) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	br := b.pool.SendBatch(ctx, batch)
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return stalled(ctx, err)
}
