package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// TestWriterNeverCheckpoints: commits do not pay for checkpoints (the
// writer's automatic checkpoint is off; the checkpointer does it), and
// what was committed is read back after the store is reopened.
func TestWriterNeverCheckpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runner.db")
	st := openAt(t, path)
	var n int
	if err := st.DB().QueryRowContext(t.Context(), `PRAGMA wal_autocheckpoint`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("writer wal_autocheckpoint = %d (%v), want 0", n, err)
	}
	ctx := t.Context()
	if _, err := st.PutSession(ctx, store.Session{ID: "s", Harness: "h", Status: store.SessionActive}); err != nil {
		t.Fatal(err)
	}
	evs := make([]store.Event, 500)
	for i := range evs {
		evs[i].Event = wire.Event{Type: wire.EventMessageDelta, Delta: "some text to fill pages"}
	}
	for range 10 {
		if _, err := st.AppendEvents(ctx, sk("s"), evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	again := openAt(t, path)
	got, err := again.ReadEvents(ctx, sk("s"), 0, 0)
	if err != nil || len(got) != 5000 {
		t.Fatalf("after reopening: %d events, %v", len(got), err)
	}
}
