package postgres_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
)

const envURL = "RUNNER_TEST_POSTGRES_URL"

func TestMain(m *testing.M) {
	if os.Getenv(envURL) == "" {
		fmt.Fprintf(os.Stderr, "store/postgres: %s is not set; skipping the PostgreSQL tests\n", envURL)
	}
	os.Exit(m.Run())
}

// newSchema creates an empty schema of its own for tb, dropped when tb
// ends, and returns a database URL whose search_path selects it. Without
// RUNNER_TEST_POSTGRES_URL it skips tb.
func newSchema(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(envURL)
	if base == "" {
		tb.Skipf("%s is not set; set it to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/runner_test?sslmode=disable) to run this test", envURL)
	}
	schema := "t_" + strings.ToLower(rand.Text())
	admin := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := admin(tb.Context(), "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := admin(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Error(err)
		}
	})
	return withSearchPath(tb, base, schema)
}

// withSearchPath adds search_path=schema to a URL or key=value DSN; pgx
// sends it as a run-time parameter on every connection.
func withSearchPath(tb testing.TB, dsn, schema string) string {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " search_path=" + schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// open opens a store in a new schema, closed when tb ends.
func open(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	st, err := postgres.Open(tb.Context(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, newSchema(t)) })
}

func BenchmarkAppendEvents(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b, newSchema(b)) })
}
