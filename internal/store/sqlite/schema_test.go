package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlite"
	"github.com/agentrunner/runner/internal/store/storetest"
	"github.com/agentrunner/runner/internal/wire"
)

// versions lists the schema versions recorded in st.
func versions(t *testing.T, st *sqlite.Store) []int {
	t.Helper()
	rows, err := st.DB().QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// upTo is 1..n.
func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func hasTable(t *testing.T, st *sqlite.Store, name string) bool {
	t.Helper()
	var n int
	err := st.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestMigrateFromEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "nested", "runner.db") // parents are created
	st := openAt(t, path)
	if got, want := versions(t, st), upTo(len(sqlite.Migrations)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	for _, table := range []string{"sessions", "turns", "events", "sandboxes", "secrets", "leases"} {
		if !hasTable(t, st, table) {
			t.Errorf("table %s is missing", table)
		}
	}
	var mode string
	if err := st.DB().QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q (%v), want wal", mode, err)
	}
}

func TestReopen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "runner.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutSession(ctx, store.Session{ID: "s", Status: store.SessionActive}); err != nil {
		t.Fatal(err)
	}
	ev := []store.Event{{Event: wire.Event{Type: wire.EventDone}}}
	if _, err := st.AppendEvents(ctx, sk("s"), ev); err != nil {
		t.Fatal(err)
	}
	before := versions(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = openAt(t, path)
	if got := versions(t, st); !slices.Equal(got, before) {
		t.Fatalf("versions after reopen %v, want %v", got, before)
	}
	if last, err := st.AppendEvents(ctx, sk("s"), ev); err != nil || last != 2 {
		t.Fatalf("AppendEvents after reopen = %d, %v; want 2", last, err)
	}
}

func TestMigrateUpgrade(t *testing.T) {
	ctx := t.Context()
	st := open(t)
	next := append(slices.Clone(sqlite.Migrations), `CREATE TABLE extra (x INTEGER); INSERT INTO extra VALUES (1);`)
	for range 2 { // the second run has nothing to do
		if err := sqlite.Migrate(ctx, st, next); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := versions(t, st), upTo(len(next)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	var n int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM extra`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("extra has %d rows (%v), want 1: a migration ran twice", n, err)
	}
}

func TestMigrateFailureRollsBack(t *testing.T) {
	st := open(t)
	bad := append(slices.Clone(sqlite.Migrations), `CREATE TABLE half (x INTEGER); CREATE TABLE broken (`)
	err := sqlite.Migrate(t.Context(), st, bad)
	if want := fmt.Sprintf("version %d", len(bad)); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Migrate = %v, want an error naming %s", err, want)
	}
	if got, want := versions(t, st), upTo(len(sqlite.Migrations)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	if hasTable(t, st, "half") {
		t.Fatal("a failed migration left table half behind")
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runner.db")
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(t.Context(), `INSERT INTO schema_migrations VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err := sqlite.Open(t.Context(), path); err == nil || !strings.Contains(err.Error(), "newer") {
		if err == nil {
			st.Close()
		}
		t.Fatalf("Open = %v, want a schema-too-new error", err)
	}
}

// TestOpenTogether opens one new file from several stores at once, as
// several processes might: each waits for the lock and finds the schema
// in place.
func TestOpenTogether(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runner.db")
	var wg sync.WaitGroup
	stores := make([]*sqlite.Store, 4)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = sqlite.Open(t.Context(), path) })
	}
	wg.Wait()
	for i, st := range stores {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { st.Close() })
	}
	if _, err := stores[0].PutSession(t.Context(), store.Session{ID: "s", Status: store.SessionActive}); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[3].GetSession(t.Context(), sk("s")); err != nil {
		t.Fatalf("a second store does not see the first one's write: %v", err)
	}
}

func TestOpenPaths(t *testing.T) {
	for _, bad := range []string{"", ":memory:"} {
		if _, err := sqlite.Open(t.Context(), bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	// Characters that mean something in a URI stay part of the name.
	path := filepath.Join(t.TempDir(), "a b?c=1#d%20.db")
	openAt(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateV1 upgrades a database written at the first schema version,
// sessions keyed by id alone: its rows keep their projects.
func TestMigrateV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runner.db")
	if err := sqlite.CreateAt(t.Context(), path, sqlite.Migrations[:1], storetest.V1Rows); err != nil {
		t.Fatal(err)
	}
	st := openAt(t, path)
	if got, want := versions(t, st), upTo(len(sqlite.Migrations)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	storetest.CheckV1Migrated(t, st)
	var bad int
	if err := st.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM pragma_foreign_key_check`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("foreign key violations after the migration: %d (%v)", bad, err)
	}
}

// sk is the key of the session id in the empty project.
func sk(id string) store.SessionKey { return store.SessionKey{SessionID: id} }
