package runner_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlite"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
)

// countingStore records how a turn's begin and end reach the store.
type countingStore struct {
	*sqlite.Store
	mu       sync.Mutex
	begins   []string       // "own" for BeginTurn, "batched" for BeginTurnWithEvents
	endTurns int            // EndTurn calls
	ends     [][]wire.Event // the events of each EndTurnWithEvents call
	outcomes []store.TurnStatus
}

func (c *countingStore) EndTurn(ctx context.Context, t store.Turn) (store.Turn, error) {
	c.mu.Lock()
	c.endTurns++
	c.mu.Unlock()
	return c.Store.EndTurn(ctx, t)
}

func (c *countingStore) BeginTurn(ctx context.Context, t store.Turn) (store.Turn, error) {
	c.mu.Lock()
	c.begins = append(c.begins, "own")
	c.mu.Unlock()
	return c.Store.BeginTurn(ctx, t)
}

func (c *countingStore) BeginTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (int64, error) {
	c.mu.Lock()
	c.begins = append(c.begins, "batched")
	c.mu.Unlock()
	return c.Store.BeginTurnWithEvents(ctx, t, evs)
}

func (c *countingStore) WriteTurnWithEvents(ctx context.Context, begin store.Turn, evs []store.Event, end store.Turn) (store.Turn, int64, error) {
	var types []wire.Event
	for _, e := range evs {
		types = append(types, e.Event)
	}
	got, last, err := c.Store.WriteTurnWithEvents(ctx, begin, evs, end)
	c.mu.Lock()
	c.begins = append(c.begins, "whole")
	c.ends = append(c.ends, types)
	c.outcomes = append(c.outcomes, end.Status)
	c.mu.Unlock()
	return got, last, err
}

func (c *countingStore) EndTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (store.Turn, int64, error) {
	var types []wire.Event
	for _, e := range evs {
		types = append(types, e.Event)
	}
	got, last, err := c.Store.EndTurnWithEvents(ctx, t, evs)
	c.mu.Lock() // counted once committed
	c.ends = append(c.ends, types)
	c.outcomes = append(c.outcomes, t.Status)
	c.mu.Unlock()
	return got, last, err
}

// TestTurnEndsInOneCommit: with a store that can, a session turn's
// outcome and its last events, done among them, are committed together
// (one transaction instead of EndTurn and another append), and done
// reaches the caller only after that commit. A warm turn (the replica
// holds the lease) is begun in its first events' commit: when the log
// starts committing during the turn (a zero-ish delay here), a commit
// of its own with them; when the turn ends first, the whole turn is one
// commit (TestShortWarmTurnIsOneCommit).
func TestTurnEndsInOneCommit(t *testing.T) {
	st := runnertest.SQLite(t)
	cs := &countingStore{Store: st}
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWithStore(t, []sandbox.Provider{p}, cs, func(c *runner.Config) { c.EventCommitDelay = time.Nanosecond })
	committedAtDone := coldThenWarm(t, e, cs)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.endTurns != 0 || len(cs.ends) != 2 {
		t.Fatalf("EndTurn called %d times, EndTurnWithEvents %d times; want 0 and 2", cs.endTurns, len(cs.ends))
	}
	for i, evs := range cs.ends {
		if len(evs) == 0 || evs[len(evs)-1].Type != wire.EventDone || cs.outcomes[i] != store.TurnCompleted {
			t.Fatalf("end %d: outcome %s with events %+v; want completed with done last", i, cs.outcomes[i], evs)
		}
	}
	if len(committedAtDone) != 2 || committedAtDone[0] != 1 || committedAtDone[1] != 2 {
		t.Fatalf("commits seen when done arrived: %v, want [1 2]", committedAtDone)
	}
	if len(cs.begins) != 2 || cs.begins[0] != "own" || cs.begins[1] != "batched" {
		t.Fatalf("begins %v, want [own batched]: the cold turn's own commit, the warm one's with its events", cs.begins)
	}
	turns, err := st.ListTurns(t.Context(), sk("s"))
	if err != nil || len(turns) != 2 || turns[1].Status != store.TurnCompleted {
		t.Fatalf("ledger: %+v %v", turns, err)
	}
}

// coldThenWarm runs a cold turn then a warm one of session s and
// returns how many outcomes cs had committed when each turn's done
// arrived.
func coldThenWarm(t *testing.T, e *env, cs *countingStore) []int {
	t.Helper()
	var committedAtDone []int
	for i, msgs := range [][]string{{"say one"}, {"say one", "one", "say two"}} {
		res, err := e.svc.Run(t.Context(), req{session: "s", messages: msgs}.wire(), func(seq int64, ev wire.Event) {
			if ev.Type == wire.EventDone {
				cs.mu.Lock()
				committedAtDone = append(committedAtDone, len(cs.ends))
				cs.mu.Unlock()
			}
		})
		if err != nil || !res.OK {
			t.Fatalf("turn %d: %+v %v", i, res, err)
		}
	}
	return committedAtDone
}

// TestShortWarmTurnIsOneCommit: a warm turn that ends before its log
// starts committing is written whole, begin, events and outcome, in one
// transaction, and done still reaches the caller only after it.
func TestShortWarmTurnIsOneCommit(t *testing.T) {
	st := runnertest.SQLite(t)
	cs := &countingStore{Store: st}
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWithStore(t, []sandbox.Provider{p}, cs, func(c *runner.Config) { c.EventCommitDelay = time.Hour })
	committedAtDone := coldThenWarm(t, e, cs)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if diff := cmp.Diff([]string{"own", "whole"}, cs.begins); diff != "" {
		t.Fatalf("begins (-want +got):\n%s", diff)
	}
	if len(cs.ends) != 2 || cs.outcomes[1] != store.TurnCompleted {
		t.Fatalf("ends %d, outcomes %v", len(cs.ends), cs.outcomes)
	}
	var types []string
	for _, ev := range cs.ends[1] {
		types = append(types, ev.Type)
	}
	// Everything the warm turn logs is in its one commit, done last.
	if diff := cmp.Diff([]string{wire.EventMessage, wire.EventData, wire.EventMessageStart, wire.EventMessageDelta, wire.EventMessageEnd, wire.EventMessage, wire.EventDone}, types); diff != "" {
		t.Fatalf("the warm turn's one commit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{1, 2}, committedAtDone); diff != "" {
		t.Fatalf("commits seen when done arrived (-want +got):\n%s", diff)
	}
	logged, err := st.ReadEvents(t.Context(), sk("s"), 0, 0)
	if err != nil || len(logged) == 0 || logged[len(logged)-1].Event.Type != wire.EventDone {
		t.Fatalf("log: %d events, %v", len(logged), err)
	}
}

// refusingStore refuses every batched begin.
type refusingStore struct{ *sqlite.Store }

func (r refusingStore) BeginTurnWithEvents(context.Context, store.Turn, []store.Event) (int64, error) {
	return 0, errdefs.ErrConflict
}

func (r refusingStore) WriteTurnWithEvents(context.Context, store.Turn, []store.Event, store.Turn) (store.Turn, int64, error) {
	return store.Turn{}, 0, fmt.Errorf("%w: %w", store.ErrNotBegun, errdefs.ErrConflict)
}

// TestWarmTurnFailsWhenItsBeginFails: a turn whose batched begin the
// ledger refused is not on disk, so it is not reported as done: it fails
// and its harness is not kept; whether the begin rode in a commit during
// the turn or in the turn's one commit at its end.
func TestWarmTurnFailsWhenItsBeginFails(t *testing.T) {
	for name, delay := range map[string]time.Duration{"committed during the turn": time.Nanosecond, "one commit": time.Hour} {
		t.Run(name, func(t *testing.T) {
			st := runnertest.SQLite(t)
			p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
			if err != nil {
				t.Fatal(err)
			}
			e := newEnvWithStore(t, []sandbox.Provider{p}, refusingStore{st}, func(c *runner.Config) { c.EventCommitDelay = delay })
			e.turn(t, req{session: "s", messages: []string{"say one"}}) // cold: its own begin
			var stop string
			res, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"say one", "one", "say two"}}.wire(), func(_ int64, ev wire.Event) {
				if ev.Type == wire.EventDone {
					stop = ev.StopReason
				}
			})
			if err == nil || res.OK || !strings.Contains(err.Error(), "record the turn in the ledger") {
				t.Fatalf("warm turn with a refused begin: %+v %v", res, err)
			}
			if stop != "error" {
				t.Fatalf("done said %q, want error", stop)
			}
			if next := e.turn(t, req{session: "s", messages: []string{"say one", "one", "say two", "", "say three"}}); next.mode == "warm" {
				t.Fatal("the harness of a turn missing from the ledger was kept warm")
			}
		})
	}
}
