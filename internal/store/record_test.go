package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
)

func TestLeaseError(t *testing.T) {
	var err error = &store.LeaseError{SessionID: "s", Owner: "r2", Expires: time.Date(2026, 11, 29, 9, 0, 30, 0, time.UTC)}
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatal("LeaseError is not ErrConflict")
	}
	if got, want := err.Error(), "session s is leased to r2 until 2026-11-29T09:00:30Z"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestTurnStatusEnded(t *testing.T) {
	for s, want := range map[store.TurnStatus]bool{
		store.TurnRunning: false, "": false, "done": false,
		store.TurnCompleted: true, store.TurnPaused: true, store.TurnFailed: true,
		store.TurnCancelled: true, store.TurnInterrupted: true,
	} {
		if got := s.Ended(); got != want {
			t.Errorf("%q.Ended() = %v, want %v", s, got, want)
		}
	}
}
