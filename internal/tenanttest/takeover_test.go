package tenanttest

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// openShared opens the cluster's store as the test's own view of it.
func openShared(t *testing.T, dsn string) store.Store {
	t.Helper()
	st, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// logOf is session sid's log in project p: sequence numbers, types and
// texts.
func logOf(t *testing.T, st store.Store, sid string) []string {
	t.Helper()
	evs, err := st.ReadEvents(t.Context(), store.SessionKey{ProjectID: "p", SessionID: sid}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, strings.Join([]string{e.Event.Type, e.Event.Role, e.Event.Text, e.Event.Delta, e.Event.StopReason}, "|"))
	}
	return out
}

// turnsOf is session sid's ledger in project p.
func turnsOf(t *testing.T, st store.Store, sid string) []store.Turn {
	t.Helper()
	turns, err := st.ListTurns(t.Context(), store.SessionKey{ProjectID: "p", SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	return turns
}

// gate is a fifo a fake harness blocks on ("exec cat <path>") until the
// test opens it; opened at cleanup too, so no harness outlives the test.
func gate(t *testing.T) (path string, open func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	open = func() {
		// Read-write and non-blocking: it opens whether or not the
		// harness reads yet, and the harness's cat sees the line.
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0)
		if err != nil {
			return
		}
		_, _ = f.WriteString("open\n")
		f.Close()
	}
	t.Cleanup(open)
	return path, open
}

// kill9 kills r with SIGKILL: no drain, its lease and registry row are
// left behind.
func kill9(t *testing.T, r *runner) {
	t.Helper()
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.done
	r.cmd = nil
}

// TestTakeoverWarmOwnerKilledLosesNothing: the owner of a warm session is
// killed with SIGKILL. Must hold: the session's next turn, sent to the
// other replica, succeeds there with the conversation intact, and the
// log holds every event it held before, unchanged, followed by the new
// turn's.
func TestTakeoverWarmOwnerKilledLosesNothing(t *testing.T) {
	rs, dsn := peerCluster(t, 2)
	owner, other := rs[0], rs[1]
	st := openShared(t, dsn)
	for _, prompt := range []string{"say the password is swordfish", "say noted", "history"} {
		if tr := owner.stream(t, fake(prompt, map[string]any{"sessionId": "warm", "projectId": "p"})); !tr.Result.OK {
			t.Fatal(string(tr.Raw))
		}
	}
	before := logOf(t, st, "warm")
	kill9(t, owner)

	next := other.stream(t, fake("what is the password?", map[string]any{"sessionId": "warm", "projectId": "p"}))
	if !next.Result.OK || !strings.Contains(next.Text(), "swordfish") {
		t.Fatalf("the killed owner's session on the other replica: %+v\n%s\nlog:\n%s", next.Result, next.Text(), other.Log())
	}
	after := logOf(t, st, "warm")
	if len(after) <= len(before) {
		t.Fatalf("log after the takeover has %d events, before it %d", len(after), len(before))
	}
	if d := cmp.Diff(before, after[:len(before)]); d != "" {
		t.Fatalf("the log before the kill changed (-before +after):\n%s", d)
	}
	turns := turnsOf(t, st, "warm")
	if len(turns) != 4 || turns[3].Owner != "replica-1" {
		t.Fatalf("ledger %+v, want 4 turns, the last on replica-1", turns)
	}
	for _, tr := range turns {
		if tr.Status != store.TurnCompleted {
			t.Fatalf("turn %d is %s, want every turn completed: %+v", tr.Index, tr.Status, turns)
		}
	}
}

// TestTakeoverOwnerKilledMidTurn: a turn sent to replica 1 is forwarded
// to the session's owner, replica 0, which is killed with SIGKILL while
// the harness works. Must hold: the caller's turn fails with an error
// naming replica 0 (never ok); the session's next turn succeeds on
// replica 1; the ledger never shows the lost turn running: absent, or
// failed naming replica 0.
func TestTakeoverOwnerKilledMidTurn(t *testing.T) {
	rs, dsn := peerCluster(t, 2)
	owner, other := rs[0], rs[1]
	st := openShared(t, dsn)
	fields := map[string]any{"sessionId": "mid", "projectId": "p"}
	if tr := owner.stream(t, fake("say the password is swordfish", fields)); !tr.Result.OK {
		t.Fatal(string(tr.Raw))
	}
	path, _ := gate(t)
	first := make(chan struct{})
	ended := make(chan floodTurn, 1)
	go func() { ended <- other.streamFlood(t, fake("say started\nexec cat "+path+"\nsay end", fields), first) }()
	<-first
	kill9(t, owner)
	lost := <-ended
	if lost.Result.OK || !strings.Contains(lost.Result.Error, "replica-0") {
		t.Fatalf("the turn whose replica was killed: %+v, want a failure naming replica-0", lost.Result)
	}

	next := other.stream(t, fake("what is the password?", fields))
	if !next.Result.OK || !strings.Contains(next.Text(), "swordfish") {
		t.Fatalf("the next turn: %+v\n%s\nlog:\n%s", next.Result, next.Text(), other.Log())
	}
	// The lost turn is in the ledger only if its begin was committed
	// before the kill (it rides in its first events' commit); then it is
	// failed, naming replica 0, never left running.
	turns := turnsOf(t, st, "mid")
	last := turns[len(turns)-1]
	if last.Status != store.TurnCompleted || last.Owner != "replica-1" {
		t.Fatalf("ledger %+v, want the next turn completed on replica-1", turns)
	}
	for _, tr := range turns[1 : len(turns)-1] {
		if tr.Status != store.TurnFailed || !strings.Contains(tr.Error, "replica-0") {
			t.Fatalf("ledger %+v: the lost turn is %s (%q), want failed naming replica-0", turns, tr.Status, tr.Error)
		}
	}
}

// TestTakeoverPartitionedOwnerCannotCommit: replica 0 owns a session and
// runs a turn of it when it is partitioned: its PostgreSQL connections
// stall (a proxy holds their bytes) and its advertised address refuses
// connections. Replica 1, sent the session's next turn, finds it gone
// (refused, no heartbeat since), takes the session over and serves the
// turn. Then the partition heals and the old owner's turn ends: its
// commit arrives carrying the old lease generation and is refused. Must
// hold: the old owner's turn fails naming replica 1, never ok; nothing
// of it after the takeover is in the log; the ledger keeps replica 1's
// turn and the old one failed.
func TestTakeoverPartitionedOwnerCannotCommit(t *testing.T) {
	dsn := storetest.PostgresSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := newTCPProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = db.Addr
	web := newTCPProxy(t, "")
	common := []string{
		"AGENTA_RUNNER_LOCAL_ISOLATION=none",
		"AGENTA_RUNNER_LOCAL_DISK_MB=0",
		"AGENTA_RUNNER_SESSION_TTL_MS=600000",
		"AGENTA_RUNNER_JOBS=off",
		"AGENTA_RUNNER_HEARTBEAT_MS=500",
	}
	old := start(t, append([]string{
		"AGENTA_RUNNER_DATABASE_URL=" + viaProxy.String(),
		"AGENTA_RUNNER_REPLICA_ID=replica-0",
		"AGENTA_RUNNER_ADVERTISE_URL=http://" + web.Addr,
		// The partition must outlast none of its store calls: they
		// arrive late, as a healed network delivers them.
		"AGENTA_RUNNER_DATABASE_STATEMENT_TIMEOUT_MS=300000",
	}, common...)...)
	web.SetTarget(strings.TrimPrefix(old.Base, "http://"))
	other := start(t, append([]string{
		"AGENTA_RUNNER_DATABASE_URL=" + dsn,
		"AGENTA_RUNNER_REPLICA_ID=replica-1",
	}, common...)...)
	st := openShared(t, dsn)
	fields := map[string]any{"sessionId": "split", "projectId": "p"}
	if tr := old.stream(t, fake("say the password is swordfish", fields)); !tr.Result.OK {
		t.Fatal(string(tr.Raw))
	}

	path, openGate := gate(t)
	first := make(chan struct{})
	ended := make(chan floodTurn, 1)
	go func() {
		ended <- old.streamFlood(t, fake("say started\nexec cat "+path+"\nsay stale end", fields), first)
	}()
	<-first
	db.Pause()
	web.Cut()

	next := other.stream(t, fake("what is the password?", fields))
	if !next.Result.OK || !strings.Contains(next.Text(), "swordfish") {
		t.Fatalf("the turn on replica-1 during the partition: %+v\n%s\nlog:\n%s", next.Result, next.Text(), other.Log())
	}
	taken := logOf(t, st, "split")

	openGate()
	db.Resume()
	stale := <-ended
	if stale.Result.OK || !strings.Contains(stale.Result.Error, "replica-1") {
		t.Fatalf("the partitioned owner's turn: %+v, want it refused naming replica-1\nlog:\n%s", stale.Result, old.Log())
	}
	after := logOf(t, st, "split")
	if d := cmp.Diff(taken, after); d != "" {
		t.Fatalf("the old owner committed after the takeover (-at takeover +now):\n%s", d)
	}
	for _, e := range after {
		if strings.Contains(e, "stale end") {
			t.Fatalf("the old owner's turn reached the log: %v", after)
		}
	}
	var okOn []string
	for _, tr := range turnsOf(t, st, "split") {
		if tr.Status == store.TurnCompleted {
			okOn = append(okOn, tr.Owner)
		}
	}
	if d := cmp.Diff([]string{"replica-0", "replica-1"}, okOn); d != "" {
		t.Fatalf("completed turns by owner (-want +got):\n%s", d)
	}
}
