package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/store"
)

// Run runs the suite. open must return a new, empty store on each call
// and close it when t ends (t.Cleanup). Subtests run in parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"Sessions", testSessions},
		{"SessionList", testSessionList},
		{"Turns", testTurns},
		{"EndTurn", testEndTurn},
		{"TurnWriter", testTurnWriter},
		{"InterruptTurns", testInterruptTurns},
		{"BeginTurnRace", testBeginTurnRace},
		{"Events", testEvents},
		{"EventsConcurrent", testEventsConcurrent},
		{"Sandboxes", testSandboxes},
		{"Secrets", testSecrets},
		{"Projects", testProjects},
		{"Leases", testLeases},
		{"LeaseRace", testLeaseRace},
		{"LeaseGenerations", testLeaseGenerations},
		{"TakeOver", testTakeOver},
		{"TakeOverRace", testTakeOverRace},
		{"Replicas", testReplicas},
		{"Fencing", testFencing},
		{"FenceRace", testFenceRace},
		{"Cancelled", testCancelled},
		{"Resumes", testResumes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

// t0 is the suite's clock origin, whole milliseconds in UTC as stored.
var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

// must returns a function that fails t on err and returns v:
// got := must(st.GetSession(ctx, sk(id)))(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// wantErr fails the test unless err is of class.
func wantErr(t *testing.T, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Fatalf("err = %v, want %v", err, class)
	}
}

// equal fails the test if got differs from want.
func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("%s mismatch (-want +got):\n%s", what, d)
	}
}

// clock brackets the store's own time stamps.
type clock struct{ from time.Time }

func startClock() clock { return clock{time.Now().Truncate(time.Millisecond)} }

// stamped fails the test unless ts lies between c's start and now, as
// the store's clock would have written it.
func (c clock) stamped(t *testing.T, what string, ts time.Time) {
	t.Helper()
	if ts.Location() != time.UTC || ts.Before(c.from) || ts.After(time.Now()) {
		t.Fatalf("%s = %v, want a UTC time in [%v, now]", what, ts, c.from)
	}
}

// tick waits until the wall clock enters a new millisecond, so that the
// store's next time stamp is later than every one before. It is the only
// wait in the suite; lease tests pass their own clock.
func tick() {
	for start := time.Now().UnixMilli(); time.Now().UnixMilli() == start; {
		time.Sleep(100 * time.Microsecond)
	}
}

// filter returns the elements of all that keep accepts, nil if none.
func filter[T any](all []T, keep func(T) bool) []T {
	var out []T
	for _, v := range all {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

// sk is the key of the session id in the empty project.
func sk(id string) store.SessionKey { return store.SessionKey{SessionID: id} }
