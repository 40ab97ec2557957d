package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/pgcut"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// Store is a store.Store in a PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	cut  *pgcut.Cutter // the pool's connections, cut at Close
	db   bounded       // pool, every call under the statement timeout
	name string        // for errors: host:port/database
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Prober = (*Store)(nil)
	_ fmt.Stringer = (*Store)(nil)
)

// The timeouts Open applies when Options leaves them zero.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultStatementTimeout = 10 * time.Second
)

// migrateTimeout bounds bringing the schema up to date at Open, a
// server that stopped answering included.
const migrateTimeout = 2 * time.Minute

// Options bound the store's calls; zero fields take the defaults.
type Options struct {
	// ConnectTimeout bounds opening one connection (unless the URL sets
	// connect_timeout).
	ConnectTimeout time.Duration
	// StatementTimeout bounds each store call, client-side (a stalled
	// server or network answers nothing), and is sent as the session's
	// statement_timeout (unless the URL sets it) so the server stops
	// what the client gave up on.
	StatementTimeout time.Duration
}

// Open connects to the database at url (a postgres:// URL or a key=value
// string, as pgx accepts; pool_max_conns and the like apply) and brings
// the schema up to date. opts, at most one, bounds its calls.
func Open(ctx context.Context, url string, opts ...Options) (*Store, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = DefaultStatementTimeout
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errdefs.With(errdefs.ErrInvalid, fmt.Errorf("postgres: %w", err))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(o.StatementTimeout.Milliseconds(), 10)
	}
	cut := pgcut.New(cfg.ConnConfig.DialFunc)
	cfg.ConnConfig.DialFunc = cut.Dial
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	mctx, cancel := context.WithTimeoutCause(ctx, migrateTimeout, errors.New("the schema migration did not finish within "+migrateTimeout.String()))
	defer cancel()
	if err := untilReady(mctx, func() error { return migrate(mctx, pool, migrations) }); err != nil {
		cut.Cut()
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	name := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	return &Store{pool: pool, cut: cut, db: bounded{pool: pool, timeout: o.StatementTimeout}, name: name}, nil
}

// A server that is starting up or shutting down refuses connections with
// SQLSTATE 57P03 (cannot_connect_now): a compose stack or a pod started
// beside its database meets it at boot (the database image's first start
// restarts the server after initdb). Open waits it out, within the
// migration's bound, rather than fail the runner's start.
const (
	notReadyFirst = 250 * time.Millisecond
	notReadyMax   = 2 * time.Second
)

// untilReady runs f again while it fails because the server is not ready
// yet, until ctx ends; the last error names the wait.
func untilReady(ctx context.Context, f func() error) error {
	wait, waited := notReadyFirst, time.Duration(0)
	for {
		err := f()
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "57P03" {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the server was still not accepting connections after %s: %w", waited.Round(time.Millisecond), err)
		case <-t.C:
		}
		waited += wait
		wait = min(2*wait, notReadyMax)
	}
}

// String names the store in errors: the server and database, never the
// credentials.
func (s *Store) String() string { return "PostgreSQL store " + s.name }

// Probe implements store.Prober: a transaction that takes a transaction
// id commits (a write to the server's log; a standby refuses it).
func (s *Store) Probe(ctx context.Context) error {
	var xid int64
	if err := s.db.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return nil
}

// Close closes every connection of the pool, without waiting for a
// server that stopped answering (pgcut).
func (s *Store) Close() error {
	s.cut.Cut()
	s.pool.Close()
	return nil
}

// isUnique reports a unique_violation.
func isUnique(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "23505"
}

// notFound turns pgx.ErrNoRows into errdefs.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return errdefs.ErrNotFound
	}
	return err
}

// collect scans every row of rows with scan, then closes rows.
func collect[T any](rows pgx.Rows, err error, scan func(sqlstore.Scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlstore.Collect(rows, scan)
}
