package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// newSession creates an active session with the given id.
func newSession(t *testing.T, st store.Store, id string) store.Session {
	t.Helper()
	return must(st.PutSession(t.Context(), store.Session{ID: id, Harness: "claude", Status: store.SessionActive}))(t)
}

func testTurns(t *testing.T, st store.Store) {
	ctx := t.Context()
	in := store.Turn{
		SessionID: "s", Index: 0, TurnID: "turn-0", Harness: "claude", AgentSessionID: "a0",
		SandboxProvider: "local", SandboxID: "sb0", StartedAt: t0, Owner: "r1",
		// ignored by BeginTurn:
		Status: store.TurnCompleted, EndedAt: t0, Usage: wire.Usage{Total: 5}, StopReason: "x", Error: "y",
	}
	_, err := st.BeginTurn(ctx, in)
	wantErr(t, err, errdefs.ErrNotFound)

	newSession(t, st, "s")
	before := must(st.GetSession(ctx, sk("s")))(t)
	tick()
	got := must(st.BeginTurn(ctx, in))(t)
	want := store.Turn{
		SessionID: "s", Index: 0, TurnID: "turn-0", Harness: "claude", AgentSessionID: "a0",
		SandboxProvider: "local", SandboxID: "sb0", StartedAt: t0, Owner: "r1", Status: store.TurnRunning,
	}
	equal(t, "BeginTurn", got, want)
	equal(t, "GetTurn", must(st.GetTurn(ctx, sk("s"), 0))(t), want)
	sess := must(st.GetSession(ctx, sk("s")))(t)
	equal(t, "LastTurnIndex", sess.LastTurnIndex, 0)
	if !sess.UpdatedAt.After(before.UpdatedAt) {
		t.Fatalf("BeginTurn left the session's UpdatedAt at %v", sess.UpdatedAt)
	}

	_, err = st.BeginTurn(ctx, in)
	wantErr(t, err, errdefs.ErrConflict)

	// Indices need not be dense; LastTurnIndex is the highest.
	must(st.BeginTurn(ctx, store.Turn{SessionID: "s", Index: 2, StartedAt: t0.Add(2 * time.Second)}))(t)
	equal(t, "LastTurnIndex", must(st.GetSession(ctx, sk("s")))(t).LastTurnIndex, 2)
	must(st.BeginTurn(ctx, store.Turn{SessionID: "s", Index: 1, StartedAt: t0.Add(time.Second)}))(t)
	equal(t, "LastTurnIndex", must(st.GetSession(ctx, sk("s")))(t).LastTurnIndex, 2)

	var idx []int
	for _, tr := range must(st.ListTurns(ctx, sk("s")))(t) {
		idx = append(idx, tr.Index)
	}
	equal(t, "ListTurns indices", idx, []int{0, 1, 2})
	equal(t, "ListTurns[0]", must(st.ListTurns(ctx, sk("s")))(t)[0], want)

	_, err = st.GetTurn(ctx, sk("s"), 3)
	wantErr(t, err, errdefs.ErrNotFound)
	_, err = st.GetTurn(ctx, sk("nope"), 0)
	wantErr(t, err, errdefs.ErrNotFound)
	_, err = st.ListTurns(ctx, sk("nope"))
	wantErr(t, err, errdefs.ErrNotFound)
	newSession(t, st, "empty")
	equal(t, "ListTurns (no turns)", len(must(st.ListTurns(ctx, sk("empty")))(t)), 0)

	for _, bad := range []store.Turn{{Index: 0}, {SessionID: "s", Index: -1}} {
		_, err := st.BeginTurn(ctx, bad)
		wantErr(t, err, errdefs.ErrInvalid)
	}
}

func testEndTurn(t *testing.T, st store.Store) {
	ctx := t.Context()
	newSession(t, st, "s")
	begun := must(st.BeginTurn(ctx, store.Turn{
		SessionID: "s", Index: 0, TurnID: "turn-0", Harness: "claude", SandboxProvider: "local",
		SandboxID: "sb0", StartedAt: t0, Owner: "r1",
	}))(t)

	for _, status := range []store.TurnStatus{store.TurnRunning, "", "bogus"} {
		bad := begun
		bad.Status = status
		_, err := st.EndTurn(ctx, bad)
		wantErr(t, err, errdefs.ErrInvalid)
	}

	end := begun
	end.Status = store.TurnCompleted
	end.EndedAt = t0.Add(5 * time.Second)
	end.Usage = wire.Usage{Input: 10, Output: 20, Total: 30, Cost: 0.25}
	end.StopReason = "end_turn"
	end.Error = "partial"
	end.AgentSessionID = "a0"
	end.SandboxProvider, end.SandboxID = "daytona", "sb1"
	want := end
	// Not outcome fields: EndTurn keeps the stored ones.
	end.TurnID, end.Harness, end.Owner, end.StartedAt = "other", "codex", "r2", t0.Add(time.Hour)

	equal(t, "EndTurn", must(st.EndTurn(ctx, end))(t), want)
	equal(t, "GetTurn", must(st.GetTurn(ctx, sk("s"), 0))(t), want)

	// The first outcome stands.
	again := want
	again.Status = store.TurnFailed
	_, err := st.EndTurn(ctx, again)
	wantErr(t, err, errdefs.ErrConflict)
	equal(t, "GetTurn after a second EndTurn", must(st.GetTurn(ctx, sk("s"), 0))(t), want)

	// A paused turn may end again.
	p := must(st.BeginTurn(ctx, store.Turn{SessionID: "s", Index: 1, StartedAt: t0}))(t)
	p.Status, p.StopReason, p.EndedAt = store.TurnPaused, "paused", t0.Add(time.Second)
	equal(t, "EndTurn paused", must(st.EndTurn(ctx, p))(t).Status, store.TurnPaused)
	p.Status, p.StopReason, p.EndedAt = store.TurnCompleted, "end_turn", t0.Add(2*time.Second)
	equal(t, "EndTurn after pause", must(st.EndTurn(ctx, p))(t), p)

	_, err = st.EndTurn(ctx, store.Turn{SessionID: "s", Index: 9, Status: store.TurnCompleted})
	wantErr(t, err, errdefs.ErrNotFound)
	_, err = st.EndTurn(ctx, store.Turn{SessionID: "nope", Index: 0, Status: store.TurnCompleted})
	wantErr(t, err, errdefs.ErrNotFound)
}

func testInterruptTurns(t *testing.T, st store.Store) {
	ctx := t.Context()
	newSession(t, st, "a")
	newSession(t, st, "b")
	begin := func(session string, index int, owner string) store.Turn {
		return must(st.BeginTurn(ctx, store.Turn{SessionID: session, Index: index, Owner: owner, StartedAt: t0}))(t)
	}
	begin("a", 0, "r1")
	done := begin("a", 1, "r1")
	done.Status, done.EndedAt = store.TurnCompleted, t0.Add(time.Second)
	must(st.EndTurn(ctx, done))(t)
	begin("a", 2, "r2")
	begin("b", 0, "r1")

	at := t0.Add(time.Minute)
	equal(t, "InterruptTurns(r1)", must(st.InterruptTurns(ctx, "r1", at))(t), 2)
	for _, c := range []struct {
		session string
		index   int
		status  store.TurnStatus
		ended   time.Time
	}{
		{"a", 0, store.TurnInterrupted, at},
		{"a", 1, store.TurnCompleted, t0.Add(time.Second)},
		{"a", 2, store.TurnRunning, time.Time{}},
		{"b", 0, store.TurnInterrupted, at},
	} {
		tr := must(st.GetTurn(ctx, sk(c.session), c.index))(t)
		if tr.Status != c.status || !tr.EndedAt.Equal(c.ended) {
			t.Errorf("turn %s/%d: %s ended %v, want %s ended %v", c.session, c.index, tr.Status, tr.EndedAt, c.status, c.ended)
		}
	}
	equal(t, "InterruptTurns(r1) again", must(st.InterruptTurns(ctx, "r1", at))(t), 0)
	equal(t, "InterruptTurns(unknown)", must(st.InterruptTurns(ctx, "r9", at))(t), 0)
}

// testBeginTurnRace starts the same turn from many goroutines: exactly
// one may win, the others see ErrConflict.
func testBeginTurnRace(t *testing.T, st store.Store) {
	ctx := t.Context()
	newSession(t, st, "s")
	const racers = 8
	for index := range 5 {
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			winner []string
			others []error
		)
		for r := range racers {
			owner := fmt.Sprintf("r%d", r)
			wg.Go(func() {
				_, err := st.BeginTurn(ctx, store.Turn{SessionID: "s", Index: index, Owner: owner, StartedAt: t0})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					winner = append(winner, owner)
				} else {
					others = append(others, err)
				}
			})
		}
		wg.Wait()
		if len(winner) != 1 {
			t.Fatalf("turn %d: %d winners %v, want 1", index, len(winner), winner)
		}
		for _, err := range others {
			if !errors.Is(err, errdefs.ErrConflict) {
				t.Fatalf("turn %d: loser got %v, want ErrConflict", index, err)
			}
		}
		equal(t, "owner of the turn", must(st.GetTurn(ctx, sk("s"), index))(t).Owner, winner[0])
	}
	equal(t, "LastTurnIndex", must(st.GetSession(ctx, sk("s")))(t).LastTurnIndex, 4)
}
