package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/eventlog"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/sqlite"
	"github.com/agentrunner/runner/internal/store/storetest"
	"github.com/agentrunner/runner/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.Global()...) }

// The group commit's contract, against each real store: events land in
// the order added, what Saved reports is readable, the turn's begin and
// outcome ride with its events, and a failed or refused write reaches
// the caller instead of a silent gap.
func TestLogConformance(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "runner.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		"postgres": func(t *testing.T) store.Store {
			st, err := postgres.Open(t.Context(), storetest.PostgresSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"OrderAndDurability", testOrderAndDurability},
		{"QuietTurnCommitsWhole", testQuietTurnCommitsWhole},
		{"BurstStartsTheDrainer", testBurstStartsTheDrainer},
		{"FailurePropagates", testFailurePropagates},
		{"RefusedBegin", testRefusedBegin},
		{"RefusedOutcome", testRefusedOutcome},
		{"FencedAfterTakeover", testFencedAfterTakeover},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
			}
		})
	}
}

var (
	t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	sk = store.SessionKey{SessionID: "s"}
)

func session(t *testing.T, st store.Store) {
	t.Helper()
	if _, err := st.PutSession(t.Context(), store.Session{ID: sk.SessionID, Harness: "claude", Status: store.SessionActive}); err != nil {
		t.Fatal(err)
	}
}

func begin() *store.Turn {
	return &store.Turn{SessionID: sk.SessionID, Index: 0, Harness: "claude", StartedAt: t0, Owner: "r1"}
}

func outcome() *store.Turn {
	return &store.Turn{SessionID: sk.SessionID, Index: 0, Status: store.TurnCompleted, EndedAt: t0.Add(time.Second), StopReason: "end_turn"}
}

func ev(seq int64) store.Event {
	return store.Event{Seq: seq, Time: t0, Event: wire.Event{Type: wire.EventMessageDelta, Text: fmt.Sprint(seq)}}
}

func done(seq int64) store.Event {
	return store.Event{Seq: seq, Time: t0, Event: wire.Event{Type: wire.EventDone, StopReason: "end_turn"}}
}

// logged is the session's log as (seq, text) pairs.
func logged(t *testing.T, st store.Store) []string {
	t.Helper()
	evs, err := st.ReadEvents(context.Background(), sk, 0, 0)
	if err != nil {
		t.Error(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%d:%s%s", e.Seq, e.Event.Type, e.Event.Text))
	}
	return out
}

func want(from, to int64, last bool) []string {
	var out []string
	for s := from; s <= to; s++ {
		out = append(out, fmt.Sprintf("%d:%s%d", s, wire.EventMessageDelta, s))
	}
	if last {
		out = append(out, fmt.Sprintf("%d:%s", to+1, wire.EventDone))
	}
	return out
}

func status(t *testing.T, st store.Store) store.TurnStatus {
	t.Helper()
	turn, err := st.GetTurn(t.Context(), sk, 0)
	if err != nil {
		t.Fatal(err)
	}
	return turn.Status
}

// saves records what Saved reports and checks, at each report, that the
// store already holds it.
type saves struct {
	t    *testing.T
	st   store.Store
	mu   sync.Mutex
	seqs []int64
	ch   chan int64
}

func (s *saves) saved(seq int64) {
	s.mu.Lock()
	s.seqs = append(s.seqs, seq)
	s.mu.Unlock()
	evs, err := s.st.ReadEvents(context.Background(), sk, seq-1, 1)
	if err != nil || len(evs) != 1 || evs[0].Seq != seq {
		s.t.Errorf("Saved(%d) before the store holds it: %v %v", seq, evs, err)
	}
	if s.ch != nil {
		s.ch <- seq
	}
}

func (s *saves) reported() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.seqs...)
}

func testOrderAndDurability(t *testing.T, st store.Store) {
	session(t, st)
	sv := &saves{t: t, st: st}
	l := eventlog.New(st.(eventlog.Ledger), sk, eventlog.Options{Begin: begin(), Delay: time.Nanosecond, Saved: sv.saved})
	const n = 3000 // more than one MaxBatch
	for seq := int64(1); seq <= n; seq++ {
		l.Add(ev(seq))
	}
	endErr, err := l.Finish(done(n+1), outcome())
	if endErr != nil || err != nil {
		t.Fatalf("Finish: outcome %v, log %v", endErr, err)
	}
	if err := l.AwaitBegin(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want(1, n, true), logged(t, st)); diff != "" {
		t.Fatalf("log (-want +got):\n%s", diff)
	}
	got := sv.reported()
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("Saved reported %d after %d", got[i], got[i-1])
		}
	}
	if len(got) == 0 || got[len(got)-1] != n+1 {
		t.Fatalf("Saved reported %v, want the last %d", got, n+1)
	}
	if s := status(t, st); s != store.TurnCompleted {
		t.Fatalf("turn %s, want %s", s, store.TurnCompleted)
	}
}

// A turn that ends before its first event waited the delay is committed
// whole, begin, events and outcome, in one transaction.
func testQuietTurnCommitsWhole(t *testing.T, st store.Store) {
	session(t, st)
	sv := &saves{t: t, st: st}
	l := eventlog.New(st.(eventlog.Ledger), sk, eventlog.Options{Begin: begin(), Delay: time.Hour, Saved: sv.saved})
	for seq := int64(1); seq <= 3; seq++ {
		l.Add(ev(seq))
	}
	if got := logged(t, st); len(got) != 0 {
		t.Fatalf("committed before the delay or the end: %v", got)
	}
	if _, err := st.GetTurn(t.Context(), sk, 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("turn begun before its first commit: %v", err)
	}
	if endErr, err := l.Finish(done(4), outcome()); endErr != nil || err != nil {
		t.Fatalf("Finish: outcome %v, log %v", endErr, err)
	}
	if diff := cmp.Diff([]int64{4}, sv.reported()); diff != "" {
		t.Fatalf("commits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want(1, 3, true), logged(t, st)); diff != "" {
		t.Fatalf("log (-want +got):\n%s", diff)
	}
	if s := status(t, st); s != store.TurnCompleted {
		t.Fatalf("turn %s, want %s", s, store.TurnCompleted)
	}
}

// CommitBurst pending events start the drainer without the delay.
func testBurstStartsTheDrainer(t *testing.T, st store.Store) {
	session(t, st)
	sv := &saves{t: t, st: st, ch: make(chan int64, eventlog.CommitBurst+1)}
	l := eventlog.New(st.(eventlog.Ledger), sk, eventlog.Options{Begin: begin(), Delay: time.Hour, Saved: sv.saved})
	for seq := int64(1); seq <= eventlog.CommitBurst; seq++ {
		l.Add(ev(seq))
	}
	for seq := range sv.ch {
		if seq == eventlog.CommitBurst {
			break
		}
	}
	if diff := cmp.Diff(want(1, eventlog.CommitBurst, false), logged(t, st)); diff != "" {
		t.Fatalf("log before the end (-want +got):\n%s", diff)
	}
	if s := status(t, st); s != store.TurnRunning {
		t.Fatalf("turn %s mid-way, want %s", s, store.TurnRunning)
	}
	if endErr, err := l.Finish(done(eventlog.CommitBurst+1), outcome()); endErr != nil || err != nil {
		t.Fatalf("Finish: outcome %v, log %v", endErr, err)
	}
}

// After a failed commit the log writes nothing more, though the store
// recovers, and Finish returns the failure: the turn must not claim a
// log with a gap.
func testFailurePropagates(t *testing.T, st store.Store) {
	session(t, st)
	if _, err := st.BeginTurn(t.Context(), *begin()); err != nil {
		t.Fatal(err)
	}
	fs := &failing{Store: st, failed: make(chan struct{}, 1)}
	sv := &saves{t: t, st: st, ch: make(chan int64, 64)}
	l := eventlog.New(fs, sk, eventlog.Options{Delay: time.Nanosecond, Saved: sv.saved})
	for seq := int64(1); seq <= 10; seq++ {
		l.Add(ev(seq))
	}
	for seq := range sv.ch {
		if seq == 10 {
			break
		}
	}
	fs.fails.Store(1)
	for seq := int64(11); seq <= 20; seq++ {
		l.Add(ev(seq))
	}
	<-fs.failed
	endErr, err := l.Finish(done(21), outcome())
	if !errors.Is(err, errInjected) {
		t.Fatalf("Finish: log error %v, want the store's %v", err, errInjected)
	}
	_ = endErr // the outcome was never written: whether it says so is the store's
	if diff := cmp.Diff(want(1, 10, false), logged(t, st)); diff != "" {
		t.Fatalf("log (-want +got):\n%s", diff)
	}
	if got := sv.reported(); got[len(got)-1] != 10 {
		t.Fatalf("Saved reported %v past the failure", got)
	}
	if s := status(t, st); s != store.TurnRunning {
		t.Fatalf("turn %s, want %s: no outcome after a failed log", s, store.TurnRunning)
	}
}

// A begin the ledger refuses (the index is taken) writes nothing, and
// AwaitBegin says so.
func testRefusedBegin(t *testing.T, st store.Store) {
	session(t, st)
	if _, err := st.BeginTurn(t.Context(), *begin()); err != nil {
		t.Fatal(err)
	}
	l := eventlog.New(st.(eventlog.Ledger), sk, eventlog.Options{Begin: begin(), Delay: time.Nanosecond})
	l.Add(ev(1))
	_, err := l.Finish(done(2), outcome())
	if berr := l.AwaitBegin(); !errors.Is(berr, errdefs.ErrConflict) {
		t.Fatalf("AwaitBegin: %v, want %v (Finish: %v)", berr, errdefs.ErrConflict, err)
	}
	if got := logged(t, st); len(got) != 0 {
		t.Fatalf("a refused begin logged %v", got)
	}
}

// A turn whose session another replica takes over commits nothing after
// the takeover, outcome included, and Finish reports it fenced, not
// refused: unlike a refused outcome, the events are not written either.
func testFencedAfterTakeover(t *testing.T, st store.Store) {
	ctx := t.Context()
	l0, err := st.AcquireLease(ctx, sk, "r1", t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	session(t, st)
	b := begin()
	b.Generation = l0.Generation
	sv := &saves{t: t, st: st, ch: make(chan int64, 64)}
	ws := &appends{Store: st, errs: make(chan error, 64)}
	l := eventlog.New(ws, sk, eventlog.Options{Begin: b, Generation: l0.Generation, Delay: time.Nanosecond, Saved: sv.saved})
	for seq := int64(1); seq <= 10; seq++ {
		l.Add(ev(seq))
	}
	for seq := range sv.ch {
		if seq == 10 {
			break
		}
	}
	if _, err := st.TakeOverLease(ctx, sk, "r2", l0, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	for len(ws.errs) > 0 {
		<-ws.errs // the appends before the takeover
	}
	// The drainer's next append, in the turn's middle, is refused.
	l.Add(ev(11))
	if err := <-ws.errs; !errors.Is(err, errdefs.ErrFenced) {
		t.Fatalf("append after the takeover: %v, want it fenced", err)
	}
	for seq := int64(12); seq <= 20; seq++ {
		l.Add(ev(seq))
	}
	end := outcome()
	end.Generation = l0.Generation
	endErr, err := l.Finish(done(21), end)
	if !errors.Is(err, errdefs.ErrFenced) {
		t.Fatalf("Finish: outcome %v, log %v; want the log fenced", endErr, err)
	}
	if diff := cmp.Diff(want(1, 10, false), logged(t, st)); diff != "" {
		t.Fatalf("log (-want +got):\n%s", diff)
	}
	if s := status(t, st); s != store.TurnRunning {
		t.Fatalf("turn %s, want %s: a fenced outcome is not written", s, store.TurnRunning)
	}
}

// A refused outcome (the first one stands) still logs the events, and
// only Finish's first result reports it.
func testRefusedOutcome(t *testing.T, st store.Store) {
	session(t, st)
	if _, err := st.BeginTurn(t.Context(), *begin()); err != nil {
		t.Fatal(err)
	}
	first := outcome()
	first.Status = store.TurnFailed
	if _, err := st.EndTurn(t.Context(), *first); err != nil {
		t.Fatal(err)
	}
	l := eventlog.New(st.(eventlog.Ledger), sk, eventlog.Options{Delay: time.Hour})
	l.Add(ev(1))
	endErr, err := l.Finish(done(2), outcome())
	if !errors.Is(endErr, errdefs.ErrConflict) || err != nil {
		t.Fatalf("Finish: outcome %v, log %v; want %v and nil", endErr, err, errdefs.ErrConflict)
	}
	if diff := cmp.Diff(want(1, 1, true), logged(t, st)); diff != "" {
		t.Fatalf("log (-want +got):\n%s", diff)
	}
	if s := status(t, st); s != store.TurnFailed {
		t.Fatalf("turn %s, want the first outcome %s", s, store.TurnFailed)
	}
}

// appends is a real store that reports the result of each of its
// middle-of-turn appends on errs.
type appends struct {
	store.Store
	errs chan error
}

var _ store.TurnWriter = (*appends)(nil)

func (a *appends) AppendFencedEvents(ctx context.Context, k store.SessionKey, gen int64, evs []store.Event) (int64, error) {
	last, err := a.Store.AppendFencedEvents(ctx, k, gen, evs)
	a.errs <- err
	return last, err
}

func (a *appends) BeginTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (int64, error) {
	return a.Store.(store.TurnWriter).BeginTurnWithEvents(ctx, t, evs)
}

func (a *appends) EndTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (store.Turn, int64, error) {
	return a.Store.(store.TurnWriter).EndTurnWithEvents(ctx, t, evs)
}

func (a *appends) WriteTurnWithEvents(ctx context.Context, b store.Turn, evs []store.Event, e store.Turn) (store.Turn, int64, error) {
	return a.Store.(store.TurnWriter).WriteTurnWithEvents(ctx, b, evs, e)
}

var errInjected = errors.New("injected store failure")

// failing is a real store whose next fails event writes fail, each
// signalled on failed.
type failing struct {
	store.Store
	fails  atomic.Int32
	failed chan struct{}
}

func (f *failing) fail() bool {
	if f.fails.Add(-1) < 0 {
		f.fails.Store(0)
		return false
	}
	f.failed <- struct{}{}
	return true
}

var _ store.TurnWriter = (*failing)(nil)

func (f *failing) AppendFencedEvents(ctx context.Context, k store.SessionKey, gen int64, evs []store.Event) (int64, error) {
	if f.fail() {
		return 0, errInjected
	}
	return f.Store.AppendFencedEvents(ctx, k, gen, evs)
}

func (f *failing) BeginTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (int64, error) {
	if f.fail() {
		return 0, errInjected
	}
	return f.Store.(store.TurnWriter).BeginTurnWithEvents(ctx, t, evs)
}

func (f *failing) EndTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (store.Turn, int64, error) {
	if f.fail() {
		return store.Turn{}, 0, errInjected
	}
	return f.Store.(store.TurnWriter).EndTurnWithEvents(ctx, t, evs)
}

func (f *failing) WriteTurnWithEvents(ctx context.Context, b store.Turn, evs []store.Event, e store.Turn) (store.Turn, int64, error) {
	if f.fail() {
		return store.Turn{}, 0, errInjected
	}
	return f.Store.(store.TurnWriter).WriteTurnWithEvents(ctx, b, evs, e)
}
