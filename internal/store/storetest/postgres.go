package storetest

import (
	"context"
	"crypto/rand"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresURLEnv names the PostgreSQL server the tests may use (.ci/run
// sets it).
const PostgresURLEnv = "RUNNER_TEST_POSTGRES_URL"

// PostgresSchema creates an empty schema of its own for tb, dropped when
// tb ends, and returns a database URL whose search_path selects it: two
// stores opened on it are two replicas sharing one database. Without
// RUNNER_TEST_POSTGRES_URL it skips tb.
func PostgresSchema(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(PostgresURLEnv)
	if base == "" {
		tb.Skipf("%s is not set; set it to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/runner_test?sslmode=disable) to run this test; CI sets it (see .ci/run)", PostgresURLEnv)
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
