package postgres_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
)

const envURL = storetest.PostgresURLEnv

func TestMain(m *testing.M) {
	if os.Getenv(envURL) == "" {
		fmt.Fprintf(os.Stderr, "store/postgres: %s is not set; skipping the PostgreSQL tests\n", envURL)
	}
	goleak.VerifyTestMain(m, leaktest.Global()...)
}

// newSchema is a fresh schema's URL (storetest.PostgresSchema).
func newSchema(tb testing.TB) string { return storetest.PostgresSchema(tb) }

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

// BenchmarkWriteTurn is a warm turn's commit (storetest.BenchWriteTurn).
func BenchmarkWriteTurn(b *testing.B) {
	storetest.BenchWriteTurn(b, func(b *testing.B) store.Store { return open(b, newSchema(b)) })
}
