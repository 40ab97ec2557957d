package eventlog

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// A follower that subscribes after events were published but before the
// log committed them gets them with its subscription; committed ones it
// reads from the log, so the hub lets them go.
func TestHubHandsUncommittedEventsToNewFollowers(t *testing.T) {
	var h Hubs
	x := h.Acquire(store.SessionKey{SessionID: "s"})
	for seq := int64(1); seq <= 3; seq++ {
		x.Publish(rec(seq))
	}
	ch, unsaved := x.Subscribe()
	defer x.Unsubscribe(ch)
	if diff := cmp.Diff([]int64{1, 2, 3}, seqs(unsaved)); diff != "" {
		t.Fatalf("uncommitted at subscription (-want +got):\n%s", diff)
	}
	x.Committed(2)
	x.Publish(rec(4))
	_, unsaved = x.Subscribe()
	if diff := cmp.Diff([]int64{3, 4}, seqs(unsaved)); diff != "" {
		t.Fatalf("after the commit of 2 (-want +got):\n%s", diff)
	}
	// Published after its commit (done is): never kept.
	x.Committed(5)
	x.Publish(rec(5))
	if _, unsaved = x.Subscribe(); len(unsaved) != 0 {
		t.Fatalf("kept %v after everything was committed", seqs(unsaved))
	}
}

func rec(seq int64) wire.Record {
	return wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &wire.Event{Type: wire.EventMessageDelta}}
}

func seqs(recs []wire.Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.Seq)
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// The uncommitted records are a ring: past maxUnsaved the oldest go, in
// order, across the ring's wrap and its growth, and a commit drops a
// prefix wherever the ring's head is.
func TestHubUnsavedRingKeepsTheNewestInOrder(t *testing.T) {
	var h Hubs
	x := h.Acquire(store.SessionKey{SessionID: "s"})
	defer x.Release()
	const n = maxUnsaved + 1500
	for seq := int64(1); seq <= n; seq++ {
		x.Publish(rec(seq))
	}
	_, got := x.Subscribe()
	if diff := cmp.Diff(span(n-maxUnsaved+1, n), seqs(got)); diff != "" {
		t.Fatalf("after %d published (-want +got):\n%s", n, diff)
	}
	if cap := len(x.unsaved.buf); cap != maxUnsaved {
		t.Fatalf("ring holds %d slots, want the bound %d", cap, maxUnsaved)
	}
	x.Committed(n - 10)
	x.Publish(rec(n + 1))
	_, got = x.Subscribe()
	if diff := cmp.Diff(span(n-9, n+1), seqs(got)); diff != "" {
		t.Fatalf("after the commit of %d (-want +got):\n%s", n-10, diff)
	}
	// A commit of everything frees the events it held.
	x.Committed(n + 1)
	for i, r := range x.unsaved.buf {
		if r.Event != nil {
			t.Fatalf("slot %d still holds committed seq %d", i, r.Seq)
		}
	}
}

// A few records cost a few slots, not the bound.
func TestHubUnsavedRingGrowsOnDemand(t *testing.T) {
	var h Hubs
	x := h.Acquire(store.SessionKey{SessionID: "s"})
	defer x.Release()
	for seq := int64(1); seq <= 20; seq++ {
		x.Publish(rec(seq))
		if seq%3 == 0 {
			x.Committed(seq - 1)
		}
	}
	_, got := x.Subscribe()
	if diff := cmp.Diff([]int64{18, 19, 20}, seqs(got)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if n := len(x.unsaved.buf); n > 32 {
		t.Fatalf("ring of %d slots for 20 records", n)
	}
}

// A hub goes once nobody holds it and it keeps nothing uncommitted; one
// that still keeps records waits for their commit.
func TestHubsPruneIdleHubs(t *testing.T) {
	var h Hubs
	turn := h.Acquire(store.SessionKey{SessionID: "s"})
	follower := h.Acquire(store.SessionKey{SessionID: "s"})
	if turn != follower {
		t.Fatal("two hubs for one session")
	}
	turn.Publish(rec(1))
	turn.Release()
	follower.Release()
	if len(h.m) != 1 {
		t.Fatalf("hub with an uncommitted record dropped (%d hubs)", len(h.m))
	}
	turn.Committed(1)
	if len(h.m) != 0 {
		t.Fatalf("%d hubs after the last commit, want 0", len(h.m))
	}
	// A committed hub that someone still holds stays.
	x := h.Acquire(store.SessionKey{SessionID: "t"})
	x.Publish(rec(1))
	x.Committed(1)
	if len(h.m) != 1 {
		t.Fatalf("held hub dropped")
	}
	x.Release()
	if len(h.m) != 0 {
		t.Fatalf("%d hubs after release, want 0", len(h.m))
	}
}
