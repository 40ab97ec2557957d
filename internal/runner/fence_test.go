package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// takeOver has replica id take session k over from whoever holds it, as
// a replica that found the owner gone does.
func takeOver(t *testing.T, st store.Store, k store.SessionKey, id string) store.Lease {
	t.Helper()
	l, err := st.GetLease(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.TakeOverLease(t.Context(), k, id, l, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantFencedTurn fails the test unless the turn failed fenced, naming the
// replica that took its session over.
func wantFencedTurn(t *testing.T, res wire.Result, err error, by string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrFenced) || !strings.Contains(err.Error(), by) {
		t.Fatalf("turn after the takeover: %v, want it fenced, naming %s", err, by)
	}
	if res.OK || !strings.Contains(res.Error, by) {
		t.Fatalf("result after the takeover: %+v, want a failure naming %s", res, by)
	}
}

// TestTakenOverWarmOwnerCannotCommit: replica A keeps a session warm and
// believes it holds the lease; replica B takes it over (A was found
// gone). A's next turn carries the old generation: the store refuses its
// writes, the turn fails naming B, and nothing of it is recorded. B then
// serves the session from the shared log.
func TestTakenOverWarmOwnerCannotCommit(t *testing.T) {
	sa, sb := sharedPostgres(t)
	a := replica(t, "replica-a", sa)
	k := store.SessionKey{ProjectID: "p", SessionID: "s"}

	first := collect(t, a, req{session: "s", messages: []string{"say the password is swordfish"}}.wire())
	if !first.res.OK {
		t.Fatal(first.res.Error)
	}
	logged, err := sb.ReadEvents(t.Context(), k, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	takeOver(t, sb, k, "replica-b")

	res, err := a.Run(t.Context(), req{session: "s", messages: []string{"say I am stale"}}.wire(), nil)
	wantFencedTurn(t, res, err, "replica-b")
	turns, err := sb.ListTurns(t.Context(), k)
	if err != nil || len(turns) != 1 {
		t.Fatalf("ledger after the fenced turn: %+v %v, want the first turn alone", turns, err)
	}
	after, err := sb.ReadEvents(t.Context(), k, 0, 0)
	if err != nil || len(after) != len(logged) {
		t.Fatalf("log after the fenced turn: %d events (%v), want %d", len(after), err, len(logged))
	}
	if a.Warm() != 0 {
		t.Error("replica A kept the harness of a session it lost warm")
	}

	b := replica(t, "replica-b", sb)
	next := collect(t, b, req{session: "s", messages: []string{"what is the password?"}}.wire())
	if !next.res.OK || !strings.Contains(next.res.Output, "swordfish") {
		t.Fatalf("new owner's turn: ok %v output %q", next.res.OK, next.res.Output)
	}
}

// TestTakenOverMidTurn: B takes the session over while A's turn runs
// (Service.TakeOver, as B's routing does for an owner found gone): B
// records the turn failed, naming A; A's end is refused, so A's turn
// fails naming B instead of reporting ok, and its done event is not in
// the log. B's next turn works.
func TestTakenOverMidTurn(t *testing.T) {
	sa, sb := sharedPostgres(t)
	a := replica(t, "replica-a", sa)
	k := store.SessionKey{ProjectID: "p", SessionID: "s"}
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	started := make(chan struct{})
	type outcome struct {
		res wire.Result
		err error
	}
	ended := make(chan outcome, 1)
	go func() {
		var once bool
		res, err := a.Run(t.Context(), req{session: "s", messages: []string{"say started\nexec cat " + fifo + "\nsay finished"}}.wire(), func(_ int64, ev wire.Event) {
			if ev.Type == wire.EventMessageDelta && !once {
				once = true
				close(started)
			}
		})
		ended <- outcome{res, err}
	}()
	<-started
	b := replica(t, "replica-b", sb)
	l, err := sb.GetLease(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.TakeOver(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	// Let the harness finish: the turn ends, and its commit is refused.
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := <-ended
	wantFencedTurn(t, o.res, o.err, "replica-b")
	evs, err := sb.ReadEvents(t.Context(), k, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Event.Type == wire.EventDone {
			t.Fatalf("the fenced turn's done is in the log: %+v", evs)
		}
	}
	turns, err := sb.ListTurns(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	// The new owner recorded the lost turn's end, naming the lost replica.
	if len(turns) != 1 || turns[0].Status != store.TurnFailed || !strings.Contains(turns[0].Error, "replica-a was lost") {
		t.Fatalf("ledger after the takeover: %+v, want the turn failed naming replica-a", turns)
	}
	next := collect(t, b, req{session: "s", messages: []string{"say after"}}.wire())
	if !next.res.OK {
		t.Fatalf("new owner's turn: %s", next.res.Error)
	}
}

// cutOff is a real store whose lease reads and probes fail while cut
// (this replica cut off from it), and which counts lease acquisitions.
type cutOff struct {
	store.Store
	cut      atomic.Bool
	acquires atomic.Int32
}

var _ store.TurnWriter = (*cutOff)(nil)

func (c *cutOff) Probe(ctx context.Context) error {
	if c.cut.Load() {
		return errors.New("cut off")
	}
	return nil
}

func (c *cutOff) GetLease(ctx context.Context, k store.SessionKey) (store.Lease, error) {
	if c.cut.Load() {
		return store.Lease{}, errors.New("cut off")
	}
	return c.Store.GetLease(ctx, k)
}

func (c *cutOff) AcquireLease(ctx context.Context, k store.SessionKey, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	c.acquires.Add(1)
	return c.Store.AcquireLease(ctx, k, owner, now, ttl)
}

func (c *cutOff) BeginTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (int64, error) {
	return c.Store.(store.TurnWriter).BeginTurnWithEvents(ctx, t, evs)
}

func (c *cutOff) EndTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (store.Turn, int64, error) {
	return c.Store.(store.TurnWriter).EndTurnWithEvents(ctx, t, evs)
}

func (c *cutOff) WriteTurnWithEvents(ctx context.Context, b store.Turn, evs []store.Event, e store.Turn) (store.Turn, int64, error) {
	return c.Store.(store.TurnWriter).WriteTurnWithEvents(ctx, b, evs, e)
}

// TestHeldLeaseNotTrustedWhileTheStoreFails: a warm session's turn
// trusts the lease this replica holds without a store call; but while
// the store fails (this replica may be cut off, and look gone to the
// others, which may take its sessions over) the lease is acquired again
// first.
func TestHeldLeaseNotTrustedWhileTheStoreFails(t *testing.T) {
	sa, _ := sharedPostgres(t)
	cs := &cutOff{Store: sa}
	a := replica(t, "replica-a", cs)
	w := a.WatchStore(time.Hour)
	w.Start()
	defer w.Stop()

	collect(t, a, req{session: "s", messages: []string{"say one"}}.wire())
	held := cs.acquires.Load()
	collect(t, a, req{session: "s", messages: []string{"say two"}}.wire())
	if got := cs.acquires.Load(); got != held {
		t.Fatalf("a warm turn on a held lease acquired it %d times, want none", got-held)
	}

	cs.cut.Store(true)
	if _, _, err := a.Holder(t.Context(), store.SessionKey{ProjectID: "p", SessionID: "other"}); err == nil {
		t.Fatal("a lease read on a cut-off store succeeded")
	}
	if a.Ready() == nil {
		t.Fatal("the replica is ready with its store failing")
	}
	_, _ = a.Run(t.Context(), req{session: "s", messages: []string{"say three"}}.wire(), nil)
	if got := cs.acquires.Load(); got == held {
		t.Fatal("a warm turn trusted its held lease while the store failed")
	}
}
