package runner_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// sharedPostgres opens two stores on one fresh PostgreSQL schema, as two
// replicas would, or skips when RUNNER_TEST_POSTGRES_URL is unset.
func sharedPostgres(t *testing.T) (store.Store, store.Store) {
	t.Helper()
	dsn := storetest.PostgresSchema(t)
	open := func() store.Store {
		st, err := postgres.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	return open(), open()
}

// replica is a Service with its own replica id and sandboxes over a
// shared store.
func replica(t *testing.T, id string, st store.Store) *runner.Service {
	t.Helper()
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWithStore(t, []sandbox.Provider{p}, st, func(c *runner.Config) { c.ReplicaID = id })
	return e.svc
}

// TestTwoReplicasOneSession: the replica holding a session's live harness
// owns it; the other answers 409 naming the owner, and runs it (cold, with
// the history from the shared log) once the owner lets go. No turn runs
// twice.
func TestTwoReplicasOneSession(t *testing.T) {
	sa, sb := sharedPostgres(t)
	a, b := replica(t, "replica-a", sa), replica(t, "replica-b", sb)

	first := collect(t, a, req{session: "s", messages: []string{"say the password is swordfish"}}.wire())
	if !first.res.OK {
		t.Fatal(first.res.Error)
	}
	_, err := b.Run(t.Context(), req{session: "s", messages: []string{"what is the password?"}}.wire(), nil)
	if err == nil || !strings.Contains(err.Error(), "replica-a") {
		t.Fatalf("second replica ran a session the first owns: %v", err)
	}
	a.Kill(t.Context(), "s", "p") // releases the warm harness and the lease
	next := collect(t, b, req{session: "s", messages: []string{"what is the password?"}}.wire())
	if next.mode != "replay" || !strings.Contains(next.res.Output, "swordfish") {
		t.Fatalf("other replica after release: mode %q output %q", next.mode, next.res.Output)
	}
	turns, err := sb.ListTurns(t.Context(), sk("s"))
	if err != nil || len(turns) != 2 || turns[0].Owner != "replica-a" || turns[1].Owner != "replica-b" {
		t.Fatalf("ledger %+v %v", turns, err)
	}
}
