package storetest

import (
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// testProjects has one session id in two projects: two sessions, with
// their own records, ledgers, logs and leases; a third project sees none.
func testProjects(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := store.SessionKey{ProjectID: "pA", SessionID: "s"}
	b := store.SessionKey{ProjectID: "pB", SessionID: "s"}
	c := store.SessionKey{ProjectID: "pC", SessionID: "s"}
	must(st.PutSession(ctx, store.Session{ID: "s", ProjectID: "pA", Harness: "claude", Status: store.SessionActive, AgentSessionID: "agentA"}))(t)
	must(st.PutSession(ctx, store.Session{ID: "s", ProjectID: "pB", Harness: "codex", Status: store.SessionActive}))(t)
	equal(t, "A's harness", must(st.GetSession(ctx, a))(t).Harness, "claude")
	equal(t, "B's harness", must(st.GetSession(ctx, b))(t).Harness, "codex")
	equal(t, "A's agent session", must(st.GetSession(ctx, a))(t).AgentSessionID, "agentA")
	_, err := st.GetSession(ctx, c)
	wantErr(t, err, errdefs.ErrNotFound)
	equal(t, "ListSessions pB", len(must(st.ListSessions(ctx, store.SessionQuery{ProjectID: "pB"}))(t)), 1)
	equal(t, "ListSessions all", len(must(st.ListSessions(ctx, store.SessionQuery{}))(t)), 2)
	equal(t, "ListSessions by id", len(must(st.ListSessions(ctx, store.SessionQuery{ID: "s"}))(t)), 2)
	equal(t, "ListSessions by id and project", must(st.ListSessions(ctx, store.SessionQuery{ID: "s", ProjectID: "pA"}))(t)[0].Harness, "claude")
	equal(t, "ListSessions by another id", len(must(st.ListSessions(ctx, store.SessionQuery{ID: "s9"}))(t)), 0)

	// Ledgers: index 0 in each, and ending B's leaves A's running.
	must(st.BeginTurn(ctx, store.Turn{ProjectID: "pA", SessionID: "s", Index: 0, TurnID: "tA", StartedAt: t0, Owner: "r1"}))(t)
	must(st.BeginTurn(ctx, store.Turn{ProjectID: "pB", SessionID: "s", Index: 0, TurnID: "tB", StartedAt: t0, Owner: "r1"}))(t)
	_, err = st.BeginTurn(ctx, store.Turn{ProjectID: "pC", SessionID: "s", Index: 0, StartedAt: t0})
	wantErr(t, err, errdefs.ErrNotFound)
	must(st.EndTurn(ctx, store.Turn{ProjectID: "pB", SessionID: "s", Index: 0, Status: store.TurnCompleted, EndedAt: t0.Add(time.Second)}))(t)
	equal(t, "A's turn", must(st.GetTurn(ctx, a, 0))(t).Status, store.TurnRunning)
	equal(t, "A's turn id", must(st.GetTurn(ctx, a, 0))(t).TurnID, "tA")
	turnsB := must(st.ListTurns(ctx, b))(t)
	equal(t, "B's ledger", []string{turnsB[0].ProjectID, turnsB[0].TurnID, string(turnsB[0].Status)}, []string{"pB", "tB", string(store.TurnCompleted)})
	_, err = st.ListTurns(ctx, c)
	wantErr(t, err, errdefs.ErrNotFound)

	// Logs: numbered apart, read apart.
	ev := func(text string) []store.Event {
		return []store.Event{{Time: t0, Event: wire.Event{Type: wire.EventMessage, Role: "user", Text: text}}}
	}
	equal(t, "A's first seq", must(st.AppendEvents(ctx, a, ev("secret of A")))(t), int64(1))
	equal(t, "A's second seq", must(st.AppendEvents(ctx, a, ev("more of A")))(t), int64(2))
	equal(t, "B's first seq", must(st.AppendEvents(ctx, b, ev("B")))(t), int64(1))
	logB := must(st.ReadEvents(ctx, b, 0, 0))(t)
	equal(t, "B's log", len(logB), 1)
	equal(t, "B's text", logB[0].Event.Text, "B")
	equal(t, "A's log", len(must(st.ReadEvents(ctx, a, 0, 0))(t)), 2)
	_, err = st.ReadEvents(ctx, c, 0, 0)
	wantErr(t, err, errdefs.ErrNotFound)
	_, err = st.AppendEvents(ctx, c, ev("C"))
	wantErr(t, err, errdefs.ErrNotFound)
	if tw, ok := st.(store.TurnWriter); ok {
		begin := store.Turn{ProjectID: "pB", SessionID: "s", Index: 1, StartedAt: t0, Owner: "r1"}
		end := begin
		end.Status, end.EndedAt = store.TurnCompleted, t0
		_, last, err := tw.WriteTurnWithEvents(ctx, begin, ev("B again"), end)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "B's seq after a whole turn", last, int64(2))
		equal(t, "A's last seq", must(st.GetSession(ctx, a))(t).LastSeq, int64(2))
		equal(t, "A's last turn", must(st.GetSession(ctx, a))(t).LastTurnIndex, 0)
	}

	// Leases: one owner each.
	const ttl = time.Minute
	must(st.AcquireLease(ctx, a, "r1", t0, ttl))(t)
	l := must(st.AcquireLease(ctx, b, "r2", t0, ttl))(t)
	equal(t, "B's lease", l, store.Lease{ProjectID: "pB", SessionID: "s", Owner: "r2", Expires: t0.Add(ttl), Generation: 1})
	equal(t, "A's holder", must(st.GetLease(ctx, a))(t).Owner, "r1")
	_, err = st.GetLease(ctx, c)
	wantErr(t, err, errdefs.ErrNotFound)
	wantLeaseError(t, st.ReleaseLease(ctx, a, "r2"), "r1", t0.Add(ttl))
	if err := st.ReleaseLease(ctx, b, "r2"); err != nil {
		t.Fatal(err)
	}
	equal(t, "A's holder after B's release", must(st.GetLease(ctx, a))(t).Owner, "r1")

	// Sandboxes and secrets carry their session's project.
	must(st.PutSandbox(ctx, store.Sandbox{Provider: "local", ID: "sbB", ProjectID: "pB", SessionID: "s", State: store.SandboxRunning}))(t)
	equal(t, "sandbox project", must(st.GetSandbox(ctx, "local", "sbB"))(t).ProjectID, "pB")
	equal(t, "sandboxes of pA", len(must(st.ListSandboxes(ctx, store.SandboxQuery{ProjectID: "pA", SessionID: "s"}))(t)), 0)
	must(st.PutSecret(ctx, store.Secret{Provider: "daytona", ID: "secB", ProjectID: "pB", SessionID: "s"}))(t)
	equal(t, "secrets of pB", len(must(st.ListSecrets(ctx, store.SecretQuery{ProjectID: "pB", SessionID: "s"}))(t)), 1)
	equal(t, "secrets of pA", len(must(st.ListSecrets(ctx, store.SecretQuery{ProjectID: "pA"}))(t)), 0)
}

// V1Rows is data as the first schema version (sessions keyed by id
// alone) held it, in SQL both stores run: session s1 recorded in project
// pA with a turn, two events, a lease, a sandbox and a secret; s2 in the
// empty project with one event; a lease and a sandbox of a session with
// no row. A migration test writes it at version 1, opens the store and
// calls CheckV1Migrated.
const V1Rows = `
INSERT INTO sessions (id, project_id, harness, status, sandbox_provider, sandbox_id,
	agent_session_id, last_turn_index, last_seq, created_at, updated_at)
VALUES ('s1', 'pA', 'claude', 'active', 'local', 'sb1', 'agent1', 0, 2, 1000, 2000),
	('s2', '', 'codex', 'active', '', '', '', -1, 1, 1000, 1500);
INSERT INTO turns (session_id, turn_index, turn_id, harness, agent_session_id, sandbox_provider,
	sandbox_id, status, started_at, ended_at, input_tokens, output_tokens, total_tokens, cost,
	stop_reason, error, owner)
VALUES ('s1', 0, 't0', 'claude', 'agent1', 'local', 'sb1', 'completed', 1000, 2000, 1, 2, 3, 0.5, 'end_turn', '', 'r1');
INSERT INTO events (session_id, seq, turn_index, at, event)
VALUES ('s1', 1, 0, 1000, '{"type":"message","role":"user","text":"hello"}'),
	('s1', 2, 0, 2000, '{"type":"done"}'),
	('s2', 1, 0, 1500, '{"type":"done"}');
INSERT INTO leases (session_id, owner, expires_at) VALUES ('s1', 'r1', 5000), ('orphan', 'r2', 6000);
INSERT INTO sandboxes (provider, id, session_id, state, labels, created_at, updated_at)
VALUES ('local', 'sb1', 's1', 'running', '{}', 1000, 1000), ('local', 'sb9', 'gone', 'paused', '{}', 1000, 1000);
INSERT INTO secrets (provider, id, name, session_id, created_at) VALUES ('daytona', 'sec1', 'n', 's1', 1000);
`

// CheckV1Migrated fails t unless st, migrated from V1Rows, holds every
// row under the project its session was recorded with (the empty one
// when it had no session row), and the id reaches no other project.
func CheckV1Migrated(t *testing.T, st store.Store) {
	t.Helper()
	ctx := t.Context()
	a := store.SessionKey{ProjectID: "pA", SessionID: "s1"}
	s1 := must(st.GetSession(ctx, a))(t)
	equal(t, "s1", []any{s1.Harness, s1.AgentSessionID, s1.LastTurnIndex, s1.LastSeq, s1.UpdatedAt},
		[]any{"claude", "agent1", 0, int64(2), time.UnixMilli(2000).UTC()})
	_, err := st.GetSession(ctx, sk("s1"))
	wantErr(t, err, errdefs.ErrNotFound)
	equal(t, "s2", must(st.GetSession(ctx, sk("s2")))(t).LastSeq, int64(1))
	turns := must(st.ListTurns(ctx, a))(t)
	equal(t, "s1's turns", len(turns), 1)
	equal(t, "s1's turn", []any{turns[0].ProjectID, turns[0].TurnID, turns[0].Status, turns[0].Usage.Total},
		[]any{"pA", "t0", store.TurnCompleted, int64(3)})
	evs := must(st.ReadEvents(ctx, a, 0, 0))(t)
	equal(t, "s1's log", len(evs), 2)
	equal(t, "s1's first event", evs[0].Event.Text, "hello")
	equal(t, "s2's log", len(must(st.ReadEvents(ctx, sk("s2"), 0, 0))(t)), 1)
	equal(t, "s1's lease", must(st.GetLease(ctx, a))(t), store.Lease{ProjectID: "pA", SessionID: "s1", Owner: "r1", Expires: time.UnixMilli(5000).UTC(), Generation: 1})
	equal(t, "orphan lease", must(st.GetLease(ctx, sk("orphan")))(t).Owner, "r2")
	equal(t, "sb1's project", must(st.GetSandbox(ctx, "local", "sb1"))(t).ProjectID, "pA")
	equal(t, "sb9's project", must(st.GetSandbox(ctx, "local", "sb9"))(t).ProjectID, "")
	secs := must(st.ListSecrets(ctx, store.SecretQuery{ProjectID: "pA"}))(t)
	equal(t, "s1's secrets", len(secs), 1)

	// The migrated schema keys by project: the id in pB is a new session,
	// and appending to it leaves pA's log alone.
	b := store.SessionKey{ProjectID: "pB", SessionID: "s1"}
	must(st.PutSession(ctx, store.Session{ID: "s1", ProjectID: "pB", Status: store.SessionActive}))(t)
	equal(t, "pB's first seq", must(st.AppendEvents(ctx, b, []store.Event{{Event: wire.Event{Type: wire.EventDone}}}))(t), int64(1))
	equal(t, "pA's next seq", must(st.AppendEvents(ctx, a, []store.Event{{Event: wire.Event{Type: wire.EventDone}}}))(t), int64(3))
	must(st.BeginTurn(ctx, store.Turn{ProjectID: "pA", SessionID: "s1", Index: 1, StartedAt: t0}))(t)
}
