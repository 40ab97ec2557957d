package tenanttest

import (
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// TestTakeoverDaytonaReattaches: two replicas on one PostgreSQL, both
// with the Daytona provider on one Daytona (the fake). The owner of a
// warm session is killed with SIGKILL. Must hold: the session's next
// turn, sent to the other replica, succeeds there in the sandbox the
// dead owner created (the session's stored sandbox id, reopened), with
// the file the first turn wrote in it; no second sandbox is created.
func TestTakeoverDaytonaReattaches(t *testing.T) {
	dt := daytonatest.New(t, daytonatest.Options{})
	dsn := storetest.PostgresSchema(t)
	var rs []*runner
	for i := range 2 {
		rs = append(rs, start(t, append(replicaEnv(dsn, i),
			"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=daytona",
			"AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER=daytona",
			"DAYTONA_API_KEY="+dt.APIKey(), "DAYTONA_API_URL="+dt.APIURL(),
		)...))
	}
	owner, other := rs[0], rs[1]
	st := openShared(t, dsn)
	k := store.SessionKey{ProjectID: "p", SessionID: "dt"}
	const create = "POST /api/sandbox"

	first := owner.stream(t, fake("pid\nwrite kept.txt swordfish", map[string]any{"sessionId": k.SessionID, "projectId": k.ProjectID}))
	if !first.Result.OK || !strings.Contains(first.Text(), "write ok") {
		t.Fatalf("first turn on the owner: %d %+v\n%s\nlog:\n%s", first.Status, first.Result, first.Text(), owner.Log())
	}
	sess, err := st.GetSession(t.Context(), k)
	if err != nil || sess.SandboxID == "" {
		t.Fatalf("the session's sandbox is not stored: %+v %v", sess, err)
	}
	if n := dt.Count(create); n != 1 {
		t.Fatalf("%d sandboxes created for the first turn, want 1", n)
	}
	kill9(t, owner)

	next := other.stream(t, fake("pid\nread kept.txt", map[string]any{"sessionId": k.SessionID, "projectId": k.ProjectID}))
	if next.Status != 200 || !next.Result.OK {
		t.Fatalf("the dead owner's session on the other replica: %d %+v\n%s\nlog:\n%s", next.Status, next.Result, next.Text(), other.Log())
	}
	if n := dt.Count(create); n != 1 {
		t.Errorf("%d sandboxes created, want the dead owner's one reattached\nlog:\n%s", n, other.Log())
	}
	if !strings.Contains(next.Text(), "read ok: swordfish") {
		t.Errorf("the first turn's file is not in the sandbox the next turn ran in:\n%s", next.Text())
	}
	after, err := st.GetSession(t.Context(), k)
	if err != nil || after.SandboxID != sess.SandboxID {
		t.Errorf("the session's sandbox went from %s to %s (%v)", sess.SandboxID, after.SandboxID, err)
	}
	if sb, ok := dt.Sandbox(sess.SandboxID); !ok || sb.State != "started" {
		t.Errorf("the dead owner's sandbox after the takeover: %+v %v, want started", sb, ok)
	}
	if !strings.Contains(other.Log(), "reopened the session's sandbox") {
		t.Errorf("no reopen logged:\n%s", other.Log())
	}
}
