package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// busyTimeout is how long a connection waits for another process's lock.
const busyTimeout = 10 * time.Second

// Store is a store.Store in one SQLite file.
type Store struct {
	path string  // absolute
	w    *sql.DB // one connection; every write goes through it
	r    *sql.DB // read-only connections
	ck   *sql.DB // the checkpointer's connection

	// The statements of AppendEvents and the turn ledger, prepared once
	// on w.
	bumpSeq *sql.Stmt
	// insertEvents[n-1] inserts n events: a turn's batch costs one
	// statement per insertChunk events, not one per event.
	insertEvents [insertChunk]*sql.Stmt
	stmts        struct {
		beginSession, insertTurn, endTurn *sql.Stmt
		insertTurnRow, bumpBegin          *sql.Stmt // a turn begun in a group
		lease                             *sql.Stmt // a fenced write's check
	}

	// appendMu guards the queue of AppendEvents calls and who commits it.
	appendMu     sync.Mutex
	queue        []*appendReq
	committing   bool           // a caller (or its heir) commits the queue
	appendClosed bool           // Close began: no more appends
	committers   sync.WaitGroup // the committer running now, if any
	ckDone       chan struct{}  // closed when the checkpointer has returned
	closed       chan struct{}  // closed by Close
	closeOnce    sync.Once
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.ReplicaLocal = (*Store)(nil)
	_ store.Prober       = (*Store)(nil)
	_ store.TurnWriter   = (*Store)(nil)
	_ fmt.Stringer       = (*Store)(nil)
)

// String names the store in errors: the file.
func (s *Store) String() string { return "SQLite store " + s.path }

// ReplicaLocal implements store.ReplicaLocal: the file is in this
// replica's data dir (processes sharing one file on one host would be
// kept apart by its leases, but replicas are separate hosts or
// containers).
func (s *Store) ReplicaLocal() bool { return true }

// Open opens (creating if needed) the database file at path, and its
// parent directory, and brings the schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" {
		return nil, errdefs.Invalidf("sqlite: need a file path, not %q", path)
	}
	s, err := open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return s, nil
}

func open(ctx context.Context, path string) (_ *Store, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, err
	}
	pragmas := []string{
		fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
		"journal_mode(WAL)",
		"synchronous(NORMAL)",
		"foreign_keys(ON)",
	}
	s := &Store{path: abs}
	defer func() {
		if err != nil {
			s.closeDBs()
		}
	}()
	// The writer never checkpoints: a checkpoint copies pages into the
	// database file and syncs it, which would land on whichever commit
	// crossed the threshold. The checkpointer does it beside the writes.
	if s.w, err = sql.Open("sqlite", dsn(abs, slices.Concat(pragmas, []string{"wal_autocheckpoint(0)"}), "_txlock=immediate")); err != nil {
		return nil, err
	}
	s.w.SetMaxOpenConns(1)
	// Several processes opening one fresh database race to switch it to
	// WAL, and the loser can get SQLITE_BUSY at once, before the busy
	// timeout applies: retry, bounded.
	for attempt := 1; ; attempt++ {
		err = migrate(ctx, s.w, migrations)
		if err == nil || attempt == 20 || !strings.Contains(err.Error(), "SQLITE_BUSY") {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, err
	}
	for _, st := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&s.bumpSeq, `UPDATE sessions SET last_seq = last_seq + ?1 WHERE project_id = ?2 AND id = ?3 AND ` + fencedBy("?2", "?3", "?4") + ` RETURNING last_seq`},
		{&s.stmts.beginSession, sqlBeginSession},
		{&s.stmts.insertTurn, sqlInsertTurn},
		{&s.stmts.endTurn, sqlEndTurn},
		{&s.stmts.insertTurnRow, sqlInsertTurnRow},
		{&s.stmts.lease, `SELECT ` + sqlstore.LeaseCols + ` FROM leases WHERE project_id = ? AND session_id = ?`},
		{&s.stmts.bumpBegin, `UPDATE sessions SET last_seq = last_seq + ?, last_turn_index = max(last_turn_index, ?), updated_at = ? WHERE project_id = ? AND id = ? RETURNING last_seq`},
	} {
		if *st.dst, err = s.w.PrepareContext(ctx, st.query); err != nil {
			return nil, err
		}
	}
	for n := 1; n <= insertChunk; n++ {
		q := `INSERT INTO events (project_id, session_id, seq, turn_index, at, event) VALUES (?, ?, ?, ?, ?, ?)` + strings.Repeat(`, (?, ?, ?, ?, ?, ?)`, n-1)
		if s.insertEvents[n-1], err = s.w.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
	}
	if s.r, err = sql.Open("sqlite", dsn(abs, append(pragmas, "query_only(1)"))); err != nil {
		return nil, err
	}
	n := max(4, runtime.GOMAXPROCS(0))
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	if s.ck, err = sql.Open("sqlite", dsn(abs, pragmas)); err != nil {
		return nil, err
	}
	s.ck.SetMaxOpenConns(1)
	s.closed = make(chan struct{})
	s.ckDone = make(chan struct{})
	go s.checkpointer(checkpointEvery)
	return s, nil
}

// checkpointEvery is how often the checkpointer moves the WAL's frames
// into the database file.
const checkpointEvery = time.Second

// checkpointer runs a passive checkpoint (it never waits for a reader or
// the writer) every interval until the store closes.
func (s *Store) checkpointer(every time.Duration) {
	defer close(s.ckDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
			_, _ = s.ck.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`) // the next tick retries
			cancel()
		}
	}
}

// dsn builds a file: URI, so that any path (even one holding '?') works.
func dsn(path string, pragmas []string, extra ...string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	out := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	for _, e := range extra {
		out += "&" + e
	}
	return out
}

// Close waits for appends in progress and closes the database. Calls
// made after Close fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.appendMu.Lock()
		s.appendClosed = true
		s.appendMu.Unlock()
		s.committers.Wait() // what was queued is committed
		close(s.closed)
		<-s.ckDone
	})
	return s.closeDBs()
}

func (s *Store) closeDBs() error {
	var errs []error
	for _, db := range []*sql.DB{s.ck, s.r, s.w} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it if
// fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// fencedBy is the condition a fenced statement writes under: the
// session's lease (the statement's placeholders of its project, session
// and the writer's generation as fenceArg spells it) has not moved past
// the writer. The one writer connection keeps any takeover out of the
// transaction until it commits.
func fencedBy(project, session, gen string) string {
	return `NOT EXISTS (SELECT 1 FROM leases WHERE project_id = ` + project + ` AND session_id = ` + session + ` AND generation > ` + gen + `)`
}

// fenceArg is a writer's generation as sqlFenced compares it: an
// unfenced write (0) passes every lease.
func fenceArg(gen int64) int64 {
	if gen <= 0 {
		return math.MaxInt64
	}
	return gen
}

// fence returns the *store.FencedError refusing a write of generation
// gen to session k, or nil, for the statements that do not test
// sqlFenced themselves. It reads the lease in tx, the write's own.
func (s *Store) fence(ctx context.Context, tx *sql.Tx, k store.SessionKey, gen int64) error {
	return s.refusal(ctx, tx, k, gen, nil)
}

// refusal tells why a fenced statement of generation gen wrote no row:
// the *store.FencedError when the lease has moved past gen, else other.
func (s *Store) refusal(ctx context.Context, tx *sql.Tx, k store.SessionKey, gen int64, other error) error {
	if gen <= 0 {
		return other
	}
	l, err := sqlstore.ScanLease(tx.StmtContext(ctx, s.stmts.lease).QueryRowContext(ctx, k.ProjectID, k.SessionID), k)
	if errors.Is(err, sql.ErrNoRows) {
		return other // never leased: nobody took it over
	}
	if err != nil {
		return err
	}
	if f := store.Fenced(k, gen, l); f != nil {
		return f
	}
	return other
}

// isUnique reports a PRIMARY KEY or UNIQUE constraint violation.
func isUnique(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

func isForeignKey(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// notFound turns sql.ErrNoRows into errdefs.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.ErrNotFound
	}
	return err
}

// collect scans every row of rows with scan, then closes rows.
func collect[T any](rows *sql.Rows, err error, scan func(sqlstore.Scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlstore.Collect(rows, scan)
}
