package storetest

import (
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
)

// testResumes: a session's resume record is put, replaced, read back
// byte for byte, kept apart per project and deleted; a record for a
// session that does not exist is refused.
func testResumes(t *testing.T, st store.Store) {
	rs, ok := st.(store.Resumes)
	if !ok {
		t.Fatalf("%T does not implement store.Resumes", st)
	}
	ctx := t.Context()
	a := store.SessionKey{ProjectID: "pA", SessionID: "s"}
	b := store.SessionKey{ProjectID: "pB", SessionID: "s"}
	_, err := rs.GetResume(ctx, a)
	wantErr(t, err, errdefs.ErrNotFound)
	wantErr(t, rs.PutResume(ctx, store.Resume{ProjectID: "pA", SessionID: "s", Request: []byte(`{}`), CreatedAt: t0}), errdefs.ErrNotFound)

	must(st.PutSession(ctx, store.Session{ID: "s", ProjectID: "pA", Harness: "claude", Status: store.SessionActive}))(t)
	must(st.PutSession(ctx, store.Session{ID: "s", ProjectID: "pB", Harness: "claude", Status: store.SessionActive}))(t)
	first := store.Resume{ProjectID: "pA", SessionID: "s", Request: []byte(`{"harness":"claude","messages":[]}`), CreatedAt: t0}
	if err := rs.PutResume(ctx, first); err != nil {
		t.Fatal(err)
	}
	equal(t, "GetResume", must(rs.GetResume(ctx, a))(t), first)
	_, err = rs.GetResume(ctx, b)
	wantErr(t, err, errdefs.ErrNotFound)

	// A newer pause replaces the record.
	second := store.Resume{ProjectID: "pA", SessionID: "s", Request: []byte("{\"x\":\"\\u0000\xff\"}"), Secrets: true, CreatedAt: t0.Add(2 * time.Second)}
	if err := rs.PutResume(ctx, second); err != nil {
		t.Fatal(err)
	}
	equal(t, "GetResume after replace", must(rs.GetResume(ctx, a))(t), second)

	if err := rs.PutResume(ctx, store.Resume{ProjectID: "pB", SessionID: "s", Request: []byte(`{"b":1}`), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := rs.DeleteResume(ctx, a); err != nil {
		t.Fatal(err)
	}
	_, err = rs.GetResume(ctx, a)
	wantErr(t, err, errdefs.ErrNotFound)
	equal(t, "B's resume after A's delete", string(must(rs.GetResume(ctx, b))(t).Request), `{"b":1}`)
	if err := rs.DeleteResume(ctx, a); err != nil {
		t.Fatalf("deleting a missing resume: %v", err)
	}
}
