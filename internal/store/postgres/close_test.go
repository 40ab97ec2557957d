package postgres_test

import (
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// TestCloseStalled: PostgreSQL stops answering and a call runs out of the
// statement timeout; Close then returns, without pgx's 15 s drain of the
// broken connection (the test's log shows how long it took).
func TestCloseStalled(t *testing.T) {
	proxy, url := storetest.ProxiedSchema(t)
	st, err := postgres.Open(t.Context(), url, postgres.Options{StatementTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	proxy.Stall()
	if err := st.Probe(t.Context()); err == nil {
		t.Fatalf("probe of a stalled server: %v", err)
	}
	start := time.Now()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %s", time.Since(start).Round(time.Millisecond))
}
