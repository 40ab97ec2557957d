package runner_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlite"
)

// failOnce fails the next turn-ending commit once it is armed, and
// nothing else: the store is writable again at once, as after a reset
// connection.
type failOnce struct {
	store.Store
	armed atomic.Bool
}

var _ store.TurnWriter = (*failOnce)(nil)

func (f *failOnce) Probe(context.Context) error { return nil }

func (f *failOnce) fail() error {
	if f.armed.CompareAndSwap(true, false) {
		return errors.New("connection reset by peer")
	}
	return nil
}

func (f *failOnce) BeginTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (int64, error) {
	return f.Store.(store.TurnWriter).BeginTurnWithEvents(ctx, t, evs)
}

func (f *failOnce) EndTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (store.Turn, int64, error) {
	if err := f.fail(); err != nil {
		return store.Turn{}, 0, err
	}
	return f.Store.(store.TurnWriter).EndTurnWithEvents(ctx, t, evs)
}

func (f *failOnce) WriteTurnWithEvents(ctx context.Context, b store.Turn, evs []store.Event, e store.Turn) (store.Turn, int64, error) {
	if err := f.fail(); err != nil {
		return store.Turn{}, 0, err
	}
	return f.Store.(store.TurnWriter).WriteTurnWithEvents(ctx, b, evs, e)
}

// TestFailedCommitConvergesWhileTheStoreIsHealthy: a turn whose end
// could not be written, on a store writable again right after (the
// probe succeeds), is recorded failed without waiting for the watch's
// next period. The failure woke the watch before the outcome was queued
// for it, so a pass that came first found nothing to write and the
// ledger showed the turn running for a whole period (10 min in
// TestFaultPostgresReset, which failed so in CI).
func TestFailedCommitConvergesWhileTheStoreIsHealthy(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "runner.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := &failOnce{Store: db}
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	svc := newEnvWithStore(t, []sandbox.Provider{p}, st).svc
	w := svc.WatchStore(time.Hour)
	w.Start()
	t.Cleanup(w.Stop)

	for i := range 20 {
		session := "s" + string(rune('a'+i))
		st.armed.Store(true)
		_, err := svc.Run(t.Context(), req{session: session, messages: []string{"say hi"}}.wire(), nil)
		if err == nil || !strings.Contains(err.Error(), "did not record the turn") {
			t.Fatalf("turn %d with its commit failed: %v, want an error naming the store", i, err)
		}
		k := store.SessionKey{ProjectID: "p", SessionID: session}
		deadline := time.Now().Add(20 * time.Second)
		for {
			tr, err := db.GetTurn(t.Context(), k, 0)
			if err == nil && tr.Status == store.TurnFailed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("turn %d: the ledger shows %q (%v) 20 s after its commit failed on a healthy store, want failed", i, tr.Status, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
