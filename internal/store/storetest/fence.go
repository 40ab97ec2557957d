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

// wantFenced fails the test unless err is a *store.FencedError refusing
// generation gen under holder's lease at holderGen.
func wantFenced(t *testing.T, what string, err error, gen int64, holder string, holderGen int64) {
	t.Helper()
	var fe *store.FencedError
	if !errors.Is(err, errdefs.ErrFenced) || !errors.As(err, &fe) {
		t.Fatalf("%s: err = %v, want a *store.FencedError", what, err)
	}
	if errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("%s: a fenced write is also ErrConflict: %v", what, err)
	}
	equal(t, what+": refusal", []any{fe.Generation, fe.Holder.Owner, fe.Holder.Generation}, []any{gen, holder, holderGen})
}

// testFencing checks that every write a turn makes carries its lease
// generation and is refused, writing nothing, once another owner has
// taken the session over; unfenced writes (generation 0) still pass.
func testFencing(t *testing.T, st store.Store) {
	ctx := t.Context()
	const ttl = time.Minute
	done := []store.Event{{Time: t0, Event: wire.Event{Type: wire.EventDone}}}

	// A holds the session at generation 1: its writes pass.
	a := must(st.AcquireLease(ctx, sk("s"), "A", t0, ttl))(t)
	sess := must(st.PutSession(ctx, store.Session{ID: "s", Harness: "claude", Status: store.SessionActive, Generation: a.Generation}))(t)
	equal(t, "Generation read back", sess.Generation, int64(0))
	turn0 := store.Turn{SessionID: "s", Index: 0, StartedAt: t0, Owner: "A", Generation: a.Generation}
	got := must(st.BeginTurn(ctx, turn0))(t)
	equal(t, "begun turn's Generation", got.Generation, int64(0))
	equal(t, "A's append", must(st.AppendFencedEvents(ctx, sk("s"), a.Generation, done))(t), int64(1))

	// B takes it over: every write of A's is refused and writes nothing.
	b := must(st.TakeOverLease(ctx, sk("s"), "B", a, t0, ttl))(t)
	before := must(st.GetSession(ctx, sk("s")))(t)
	_, err := st.AppendFencedEvents(ctx, sk("s"), a.Generation, done)
	wantFenced(t, "AppendFencedEvents", err, 1, "B", 2)
	_, err = st.PutSession(ctx, store.Session{ID: "s", Harness: "codex", Status: store.SessionActive, SandboxID: "x", Generation: a.Generation})
	wantFenced(t, "PutSession", err, 1, "B", 2)
	end0 := turn0
	end0.Status, end0.EndedAt = store.TurnCompleted, t0
	_, err = st.EndTurn(ctx, end0)
	wantFenced(t, "EndTurn", err, 1, "B", 2)
	turn1 := store.Turn{SessionID: "s", Index: 1, StartedAt: t0, Owner: "A", Generation: a.Generation}
	_, err = st.BeginTurn(ctx, turn1)
	wantFenced(t, "BeginTurn", err, 1, "B", 2)
	if tw, ok := st.(store.TurnWriter); ok {
		_, err = tw.BeginTurnWithEvents(ctx, turn1, done)
		wantFenced(t, "BeginTurnWithEvents", err, 1, "B", 2)
		// Unlike a refused outcome (ErrConflict), a fenced one logs
		// nothing either.
		_, _, err = tw.EndTurnWithEvents(ctx, end0, done)
		wantFenced(t, "EndTurnWithEvents", err, 1, "B", 2)
		end1 := turn1
		end1.Status, end1.EndedAt = store.TurnCompleted, t0
		_, _, err = tw.WriteTurnWithEvents(ctx, turn1, done, end1)
		wantFenced(t, "WriteTurnWithEvents", err, 1, "B", 2)
		wantErr(t, err, store.ErrNotBegun)
	}
	equal(t, "session after A's refused writes", must(st.GetSession(ctx, sk("s")))(t), before)
	equal(t, "turns after A's refused writes", len(must(st.ListTurns(ctx, sk("s")))(t)), 1)
	equal(t, "turn 0 after A's refused end", must(st.GetTurn(ctx, sk("s"), 0))(t).Status, store.TurnRunning)
	equal(t, "log after A's refused writes", len(must(st.ReadEvents(ctx, sk("s"), 0, 0))(t)), 1)

	// B's writes pass; so do unfenced ones.
	end0.Generation, end0.Status, end0.Error = b.Generation, store.TurnFailed, "replica A was lost"
	must(st.EndTurn(ctx, end0))(t)
	turn1.Generation, turn1.Owner = b.Generation, "B"
	must(st.BeginTurn(ctx, turn1))(t)
	equal(t, "B's append", must(st.AppendFencedEvents(ctx, sk("s"), b.Generation, done))(t), int64(2))
	equal(t, "unfenced append", must(st.AppendFencedEvents(ctx, sk("s"), 0, done))(t), int64(3))
	must(st.PutSession(ctx, store.Session{ID: "s", Harness: "claude", Status: store.SessionActive, Generation: b.Generation}))(t)

	// Released by B, the generation stays: A is still fenced, and told
	// the lease is free.
	if err := st.ReleaseLease(ctx, sk("s"), "B"); err != nil {
		t.Fatal(err)
	}
	_, err = st.AppendFencedEvents(ctx, sk("s"), a.Generation, done)
	wantFenced(t, "AppendFencedEvents after release", err, 1, "", 2)

	// A session never leased fences nothing; one of another project is
	// fenced by its own lease alone.
	newSession(t, st, "free")
	equal(t, "never leased", must(st.AppendFencedEvents(ctx, sk("free"), 7, done))(t), int64(1))
	p := store.SessionKey{ProjectID: "p", SessionID: "s"}
	must(st.PutSession(ctx, store.Session{ID: "s", ProjectID: "p", Status: store.SessionActive}))(t)
	equal(t, "other project", must(st.AppendFencedEvents(ctx, p, a.Generation, done))(t), int64(1))
	// A write at the lease's generation to a missing session is not
	// fenced: the session is missing.
	must(st.AcquireLease(ctx, sk("gone"), "A", t0, ttl))(t)
	_, err = st.AppendFencedEvents(ctx, sk("gone"), 1, done)
	wantErr(t, err, errdefs.ErrNotFound)
}

// testFenceRace has writers append at generation 1 while another owner
// takes the session over: once TakeOverLease has returned, no write of
// theirs commits. What the log holds when the takeover returns is all it
// will ever hold of them.
func testFenceRace(t *testing.T, st store.Store) {
	ctx := t.Context()
	const writers = 6
	for round := range 3 {
		k := sk(fmt.Sprintf("s%d", round))
		a := must(st.AcquireLease(ctx, k, "A", t0, time.Minute))(t)
		must(st.PutSession(ctx, store.Session{ID: k.SessionID, Status: store.SessionActive, Generation: a.Generation}))(t)
		evs := []store.Event{{Time: t0, Event: wire.Event{Type: wire.EventDone}}}
		var wg sync.WaitGroup
		started := make(chan struct{}, writers)
		for range writers {
			wg.Go(func() {
				for n := 0; ; n++ {
					if n == 1 {
						started <- struct{}{}
					}
					_, err := st.AppendFencedEvents(ctx, k, a.Generation, evs)
					if errors.Is(err, errdefs.ErrFenced) {
						return
					}
					if err != nil {
						t.Errorf("append at generation 1: %v", err)
						return
					}
				}
			})
		}
		for range writers {
			<-started // every writer has committed once: they are racing
		}
		must(st.TakeOverLease(ctx, k, "B", a, t0, time.Minute))(t)
		atTakeover := must(st.GetSession(ctx, k))(t).LastSeq
		wg.Wait()
		equal(t, fmt.Sprintf("%s: events after the takeover returned", k), must(st.GetSession(ctx, k))(t).LastSeq, atTakeover)
	}
}
