package runner

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/wire"
)

// A follower that subscribes after events were published but before the
// log committed them gets them with its subscription; committed ones it
// reads from the log, so the hub lets them go.
func TestHubHandsUncommittedEventsToNewFollowers(t *testing.T) {
	var h hubs
	x := h.get("s")
	rec := func(seq int64) wire.Record {
		return wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &wire.Event{Type: wire.EventMessageDelta}}
	}
	seqs := func(recs []wire.Record) []int64 {
		var out []int64
		for _, r := range recs {
			out = append(out, r.Seq)
		}
		return out
	}
	for seq := int64(1); seq <= 3; seq++ {
		x.publish(rec(seq))
	}
	ch, unsaved := x.subscribe()
	defer x.unsubscribe(ch)
	if diff := cmp.Diff([]int64{1, 2, 3}, seqs(unsaved)); diff != "" {
		t.Fatalf("uncommitted at subscription (-want +got):\n%s", diff)
	}
	x.committed(2)
	x.publish(rec(4))
	_, unsaved = x.subscribe()
	if diff := cmp.Diff([]int64{3, 4}, seqs(unsaved)); diff != "" {
		t.Fatalf("after the commit of 2 (-want +got):\n%s", diff)
	}
	// Published after its commit (done is): never kept.
	x.committed(5)
	x.publish(rec(5))
	if _, unsaved = x.subscribe(); len(unsaved) != 0 {
		t.Fatalf("kept %v after everything was committed", seqs(unsaved))
	}
}
