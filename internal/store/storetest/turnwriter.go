package storetest

import (
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// testTurnWriter checks EndTurnWithEvents, for stores that have it: the
// events and the outcome land together; a refused outcome still logs the
// events; an unknown session writes nothing.
func testTurnWriter(t *testing.T, st store.Store) {
	tw, ok := st.(store.TurnWriter)
	if !ok {
		t.Skip("the store has no TurnWriter")
	}
	ctx := t.Context()
	newSession(t, st, "s")
	user := []store.Event{{Time: t0, Event: wire.Event{Type: wire.EventMessage, Role: "user", Text: "hi"}}}
	in := store.Turn{SessionID: "s", Index: 0, Harness: "claude", StartedAt: t0, Owner: "r1"}
	_, err := tw.BeginTurnWithEvents(ctx, store.Turn{SessionID: "nope", Index: 0, StartedAt: t0}, user)
	wantErr(t, err, errdefs.ErrNotFound)
	equal(t, "BeginTurnWithEvents last", must(tw.BeginTurnWithEvents(ctx, in, user))(t), int64(1))
	begun := must(st.GetTurn(ctx, sk("s"), 0))(t)
	equal(t, "begun status", begun.Status, store.TurnRunning)
	// A taken index is refused and writes nothing.
	_, err = tw.BeginTurnWithEvents(ctx, in, user)
	wantErr(t, err, errdefs.ErrConflict)
	sess := must(st.GetSession(ctx, sk("s")))(t)
	equal(t, "after a refused begin", []int64{sess.LastSeq, int64(sess.LastTurnIndex)}, []int64{1, 0})

	end := begun
	end.Status, end.EndedAt, end.StopReason = store.TurnCompleted, t0.Add(time.Second), "end_turn"
	end.Usage = wire.Usage{Input: 1, Output: 2, Total: 3}
	evs := []store.Event{
		{Time: t0.Add(time.Second), Event: wire.Event{Type: wire.EventMessage, Role: "assistant", Text: "hello"}},
		{Time: t0.Add(time.Second), Event: wire.Event{Type: wire.EventDone, StopReason: "end_turn"}},
	}
	got, last, err := tw.EndTurnWithEvents(ctx, end, evs)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "EndTurnWithEvents turn", got, end)
	equal(t, "EndTurnWithEvents last", last, int64(3))
	equal(t, "GetTurn", must(st.GetTurn(ctx, sk("s"), 0))(t), end)
	logged := must(st.ReadEvents(ctx, sk("s"), 1, 0))(t)
	equal(t, "logged types", []string{logged[0].Event.Type, logged[1].Event.Type}, []string{wire.EventMessage, wire.EventDone})
	equal(t, "logged seqs", []int64{logged[0].Seq, logged[1].Seq}, []int64{2, 3})

	// The first outcome stands, and the events are still logged.
	again := end
	again.Status = store.TurnFailed
	_, last, err = tw.EndTurnWithEvents(ctx, again, evs[1:])
	wantErr(t, err, errdefs.ErrConflict)
	equal(t, "last after a refused outcome", last, int64(4))
	equal(t, "GetTurn after a refused outcome", must(st.GetTurn(ctx, sk("s"), 0))(t), end)

	_, _, err = tw.EndTurnWithEvents(ctx, store.Turn{SessionID: "nope", Index: 0, Status: store.TurnCompleted}, evs)
	wantErr(t, err, errdefs.ErrNotFound)
	_, _, err = tw.EndTurnWithEvents(ctx, store.Turn{SessionID: "s", Index: 0, Status: store.TurnRunning}, evs)
	wantErr(t, err, errdefs.ErrInvalid)
	equal(t, "LastSeq", must(st.GetSession(ctx, sk("s")))(t).LastSeq, int64(4))

	// A whole turn in one transaction.
	begin := store.Turn{SessionID: "s", Index: 1, Harness: "claude", StartedAt: t0, Owner: "r1"}
	whole := begin
	whole.Status, whole.EndedAt, whole.StopReason = store.TurnCompleted, t0.Add(2*time.Second), "end_turn"
	got, last, err = tw.WriteTurnWithEvents(ctx, begin, append(user, evs...), whole)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "WriteTurnWithEvents turn", got, whole)
	equal(t, "WriteTurnWithEvents last", last, int64(7))
	equal(t, "GetTurn after WriteTurnWithEvents", must(st.GetTurn(ctx, sk("s"), 1))(t), whole)
	logged = must(st.ReadEvents(ctx, sk("s"), 4, 0))(t)
	equal(t, "whole turn's events", len(logged), 3)
	// A refused begin writes nothing, the outcome and the events included.
	_, _, err = tw.WriteTurnWithEvents(ctx, begin, evs, whole)
	wantErr(t, err, errdefs.ErrConflict)
	wantErr(t, err, store.ErrNotBegun)
	_, _, err = tw.WriteTurnWithEvents(ctx, store.Turn{SessionID: "nope", Index: 0, StartedAt: t0}, evs, store.Turn{SessionID: "nope", Index: 0, Status: store.TurnCompleted})
	wantErr(t, err, errdefs.ErrNotFound)
	wantErr(t, err, store.ErrNotBegun)
	sess = must(st.GetSession(ctx, sk("s")))(t)
	equal(t, "after refused whole turns", []int64{sess.LastSeq, int64(sess.LastTurnIndex)}, []int64{7, 1})
}
