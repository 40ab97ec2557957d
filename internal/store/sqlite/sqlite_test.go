package sqlite_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlite"
	"github.com/agentrunner/runner/internal/store/storetest"
	"github.com/agentrunner/runner/internal/wire"
)

// open opens a new database in a temporary directory, closed when tb ends.
func open(tb testing.TB) *sqlite.Store {
	tb.Helper()
	return openAt(tb, filepath.Join(tb.TempDir(), "runner.db"))
}

// openAt opens the database at path, closed when tb ends.
func openAt(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(tb.Context(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := st.Close(); err != nil {
			tb.Error(err)
		}
	})
	return st
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func BenchmarkAppendEvents(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b) })
}

func TestAppendAfterClose(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "runner.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutSession(t.Context(), store.Session{ID: "s", Status: store.SessionActive}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = st.AppendEvents(t.Context(), sk("s"), []store.Event{{Event: wire.Event{Type: wire.EventDone}}})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("AppendEvents after Close = %v, want ErrUnavailable", err)
	}
}

// BenchmarkWriteTurn is a warm turn's commit (storetest.BenchWriteTurn).
func BenchmarkWriteTurn(b *testing.B) {
	storetest.BenchWriteTurn(b, func(b *testing.B) store.Store { return open(b) })
}
