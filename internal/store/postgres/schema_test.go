package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
	"github.com/agentrunner/runner/internal/wire"
)

// versions lists the schema versions recorded in st.
func versions(t *testing.T, st *postgres.Store) []int {
	t.Helper()
	rows, err := st.Pool().Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
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

func hasTable(t *testing.T, st *postgres.Store, name string) bool {
	t.Helper()
	var n int
	err := st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM information_schema.tables
WHERE table_schema = current_schema() AND table_name = $1`, name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestMigrateFromEmpty(t *testing.T) {
	st := open(t, newSchema(t))
	if got, want := versions(t, st), upTo(len(postgres.Migrations)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	for _, table := range []string{"sessions", "turns", "events", "sandboxes", "secrets", "leases"} {
		if !hasTable(t, st, table) {
			t.Errorf("table %s is missing", table)
		}
	}
}

func TestReopen(t *testing.T) {
	ctx := t.Context()
	dsn := newSchema(t)
	st, err := postgres.Open(ctx, dsn)
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
	st.Close()

	st = open(t, dsn)
	if got := versions(t, st); !slices.Equal(got, before) {
		t.Fatalf("versions after reopen %v, want %v", got, before)
	}
	if last, err := st.AppendEvents(ctx, sk("s"), ev); err != nil || last != 2 {
		t.Fatalf("AppendEvents after reopen = %d, %v; want 2", last, err)
	}
}

func TestMigrateUpgrade(t *testing.T) {
	ctx := t.Context()
	st := open(t, newSchema(t))
	next := append(slices.Clone(postgres.Migrations), `CREATE TABLE extra (x INTEGER); INSERT INTO extra VALUES (1);`)
	for range 2 { // the second run has nothing to do
		if err := postgres.Migrate(ctx, st, next); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := versions(t, st), upTo(len(next)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM extra`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("extra has %d rows (%v), want 1: a migration ran twice", n, err)
	}
}

func TestMigrateFailureRollsBack(t *testing.T) {
	st := open(t, newSchema(t))
	bad := append(slices.Clone(postgres.Migrations), `CREATE TABLE half (x INTEGER); CREATE TABLE broken (`)
	err := postgres.Migrate(t.Context(), st, bad)
	if want := fmt.Sprintf("version %d", len(bad)); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Migrate = %v, want an error naming %s", err, want)
	}
	if got, want := versions(t, st), upTo(len(postgres.Migrations)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	if hasTable(t, st, "half") {
		t.Fatal("a failed migration left table half behind")
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dsn := newSchema(t)
	st := open(t, dsn)
	if _, err := st.Pool().Exec(t.Context(), `INSERT INTO schema_migrations VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	if st, err := postgres.Open(t.Context(), dsn); err == nil || !strings.Contains(err.Error(), "newer") {
		if err == nil {
			st.Close()
		}
		t.Fatalf("Open = %v, want a schema-too-new error", err)
	}
}

// TestOpenTogether starts several replicas on one empty schema at once:
// the advisory lock lets one migrate while the others wait.
func TestOpenTogether(t *testing.T) {
	dsn := newSchema(t)
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 4)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(t.Context(), dsn) })
	}
	wg.Wait()
	for i, st := range stores {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { st.Close() })
	}
	if got, want := versions(t, stores[0]), upTo(len(postgres.Migrations)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := postgres.Open(t.Context(), "postgres://%zz"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Open = %v, want ErrInvalid", err)
	}
}

// TestMigrateV1 upgrades a database written at the first schema version,
// sessions keyed by id alone: its rows keep their projects.
func TestMigrateV1(t *testing.T) {
	dsn := newSchema(t)
	if err := postgres.CreateAt(t.Context(), dsn, postgres.Migrations[:1], storetest.V1Rows); err != nil {
		t.Fatal(err)
	}
	st := open(t, dsn)
	if got, want := versions(t, st), upTo(len(postgres.Migrations)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	storetest.CheckV1Migrated(t, st)
}

// sk is the key of the session id in the empty project.
func sk(id string) store.SessionKey { return store.SessionKey{SessionID: id} }
