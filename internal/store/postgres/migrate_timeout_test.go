package postgres_test

import (
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// TestMigrateOutlastsStatementTimeout: the statement timeout bounds store
// calls, not the schema's migration at Open. With a timeout shorter than
// any DDL (a loaded server's first boot with 1 s took longer), Open
// still brings the schema up.
func TestMigrateOutlastsStatementTimeout(t *testing.T) {
	url := storetest.PostgresSchema(t)
	st, err := postgres.Open(t.Context(), url, postgres.Options{StatementTimeout: time.Millisecond})
	if err != nil {
		t.Fatalf("Open with a 1 ms statement timeout: %v", err)
	}
	st.Close()
	// Read back with the default timeout: 1 ms fails any query.
	st, err = postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if v := versions(t, st); len(v) == 0 {
		t.Fatal("no schema version recorded")
	}
}
