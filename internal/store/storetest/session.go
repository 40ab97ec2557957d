package storetest

import (
	"cmp"
	"slices"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

func testSessions(t *testing.T, st store.Store) {
	ctx := t.Context()
	k := store.SessionKey{ProjectID: "p1", SessionID: "s1"}
	_, err := st.GetSession(ctx, k)
	wantErr(t, err, errdefs.ErrNotFound)

	c := startClock()
	in := store.Session{
		ID: "s1", ProjectID: "p1", Harness: "claude", Status: store.SessionActive,
		SandboxProvider: "local", SandboxID: "sb1", AgentSessionID: "a1",
		LastTurnIndex: 7, LastSeq: 9, // the store's own: ignored
		CreatedAt: t0, UpdatedAt: t0, // the store's own: ignored
	}
	got := must(st.PutSession(ctx, in))(t)
	c.stamped(t, "CreatedAt", got.CreatedAt)
	if !got.UpdatedAt.Equal(got.CreatedAt) {
		t.Fatalf("new session: UpdatedAt %v != CreatedAt %v", got.UpdatedAt, got.CreatedAt)
	}
	want := in
	want.LastTurnIndex, want.LastSeq = -1, 0
	want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
	equal(t, "PutSession (create)", got, want)
	equal(t, "GetSession", must(st.GetSession(ctx, k))(t), want)
	// The id alone, in another project, is another session.
	_, err = st.GetSession(ctx, sk("s1"))
	wantErr(t, err, errdefs.ErrNotFound)

	// Update replaces every mutable field and keeps the store's own.
	created := got.CreatedAt
	must(st.BeginTurn(ctx, store.Turn{ProjectID: "p1", SessionID: "s1", Index: 0}))(t)
	must(st.AppendEvents(ctx, k, []store.Event{{Event: wire.Event{Type: wire.EventDone}}}))(t)
	tick()
	upd := store.Session{ID: "s1", ProjectID: "p1", Harness: "codex", Status: store.SessionDeleted, LastTurnIndex: 3, LastSeq: 9}
	got = must(st.PutSession(ctx, upd))(t)
	c.stamped(t, "UpdatedAt", got.UpdatedAt)
	if !got.UpdatedAt.After(created) {
		t.Fatalf("UpdatedAt %v not after CreatedAt %v", got.UpdatedAt, created)
	}
	want = upd
	want.LastTurnIndex, want.LastSeq = 0, 1
	want.CreatedAt, want.UpdatedAt = created, got.UpdatedAt
	equal(t, "PutSession (update)", got, want)
	equal(t, "GetSession (updated)", must(st.GetSession(ctx, k))(t), want)

	for _, bad := range []store.Session{
		{Status: store.SessionActive},
		{ID: "s2"},
		{ID: "s2", Status: "bogus"},
	} {
		_, err := st.PutSession(ctx, bad)
		wantErr(t, err, errdefs.ErrInvalid)
	}
	_, err = st.GetSession(ctx, sk("s2"))
	wantErr(t, err, errdefs.ErrNotFound)
}

func testSessionList(t *testing.T, st store.Store) {
	ctx := t.Context()
	equal(t, "ListSessions (empty)", len(must(st.ListSessions(ctx, store.SessionQuery{}))(t)), 0)
	put := func(id, project string, status store.SessionStatus) store.Session {
		return must(st.PutSession(ctx, store.Session{ID: id, ProjectID: project, Status: status}))(t)
	}
	all := []store.Session{
		put("a", "p1", store.SessionActive),
		put("b", "p1", store.SessionDeleted),
		put("c", "p2", store.SessionActive),
		put("d", "p2", store.SessionActive),
	}
	tick()
	all[0] = put("a", "p1", store.SessionActive) // now the most recently updated
	byRecency := func(a, b store.Session) int {
		return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(a.ID, b.ID))
	}
	slices.SortFunc(all, byRecency)
	for _, tc := range []struct {
		name string
		q    store.SessionQuery
		want []store.Session
	}{
		{"all", store.SessionQuery{}, all},
		{"project", store.SessionQuery{ProjectID: "p1"}, filter(all, func(s store.Session) bool { return s.ProjectID == "p1" })},
		{"status", store.SessionQuery{Status: store.SessionActive}, filter(all, func(s store.Session) bool { return s.Status == store.SessionActive })},
		{"both", store.SessionQuery{ProjectID: "p2", Status: store.SessionDeleted}, nil},
		{"limit", store.SessionQuery{Limit: 2}, all[:2]},
		{"unknown project", store.SessionQuery{ProjectID: "p9"}, nil},
	} {
		got := must(st.ListSessions(ctx, tc.q))(t)
		if len(got) == 0 {
			got = nil
		}
		equal(t, "ListSessions "+tc.name, got, tc.want)
	}
	equal(t, "most recently updated", all[0].ID, "a")
}
