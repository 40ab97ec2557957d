package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

func testEvents(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, err := st.AppendEvents(ctx, sk("s"), []store.Event{{Event: wire.Event{Type: wire.EventDone}}})
	wantErr(t, err, errdefs.ErrNotFound)
	_, err = st.ReadEvents(ctx, sk("s"), 0, 0)
	wantErr(t, err, errdefs.ErrNotFound)

	newSession(t, st, "s")
	newSession(t, st, "other")
	equal(t, "ReadEvents (none yet)", len(must(st.ReadEvents(ctx, sk("s"), 0, 0))(t)), 0)
	equal(t, "AppendEvents (nothing)", must(st.AppendEvents(ctx, sk("s"), nil))(t), int64(0))

	evs := []store.Event{
		{Seq: 99, TurnIndex: 0, Time: t0, Event: wire.Event{Type: wire.EventMessageStart, ID: "m1"}},
		{TurnIndex: 0, Time: t0.Add(time.Millisecond), Event: wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: "héllo \"wörld\"\n"}},
		{TurnIndex: 0, Time: t0.Add(2 * time.Millisecond), Event: wire.Event{
			Type: wire.EventToolCall, ID: "c1", Name: "read", Input: json.RawMessage(`{"path":"/a"}`),
		}},
		{TurnIndex: 1, Time: t0.Add(time.Second), Event: wire.UsageEvent(wire.Usage{Input: 1, Output: 2, Total: 3, Cost: 0.5})},
	}
	equal(t, "AppendEvents", must(st.AppendEvents(ctx, sk("s"), evs))(t), int64(4))
	want := make([]store.Event, len(evs))
	for i, e := range evs {
		e.Seq = int64(i + 1)
		want[i] = e
	}
	equal(t, "ReadEvents", must(st.ReadEvents(ctx, sk("s"), 0, 0))(t), want)
	equal(t, "ReadEvents after 1, limit 2", must(st.ReadEvents(ctx, sk("s"), 1, 2))(t), want[1:3])
	equal(t, "ReadEvents after 3, limit 10", must(st.ReadEvents(ctx, sk("s"), 3, 10))(t), want[3:])
	equal(t, "ReadEvents after the last", len(must(st.ReadEvents(ctx, sk("s"), 4, 0))(t)), 0)
	equal(t, "LastSeq", must(st.GetSession(ctx, sk("s")))(t).LastSeq, int64(4))

	// Each session numbers its own events.
	equal(t, "AppendEvents (other session)", must(st.AppendEvents(ctx, sk("other"), evs[:1]))(t), int64(1))
	equal(t, "AppendEvents (nothing, after 4)", must(st.AppendEvents(ctx, sk("s"), nil))(t), int64(4))
	equal(t, "AppendEvents (more)", must(st.AppendEvents(ctx, sk("s"), evs[1:3]))(t), int64(6))
	got := must(st.ReadEvents(ctx, sk("s"), 4, 0))(t)
	equal(t, "seqs after 4", []int64{got[0].Seq, got[1].Seq}, []int64{5, 6})
	equal(t, "ReadEvents (other session)", len(must(st.ReadEvents(ctx, sk("other"), 0, 0))(t)), 1)
}

// testEventsConcurrent appends from many goroutines at once: the numbers
// must be 1..n without gaps or repeats, each batch must be contiguous and
// in order, and a failing append must not fail the others.
func testEventsConcurrent(t *testing.T, st store.Store) {
	ctx := t.Context()
	newSession(t, st, "s")
	newSession(t, st, "noise")
	const writers, batches = 8, 15
	type batch struct {
		last int64
		ids  []string
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done []batch
	)
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				n := 1 + (w+b)%4
				evs := make([]store.Event, n)
				ids := make([]string, n)
				for i := range evs {
					ids[i] = fmt.Sprintf("%d/%d/%d", w, b, i)
					evs[i] = store.Event{TurnIndex: w, Time: t0, Event: wire.Event{Type: wire.EventMessageDelta, ID: ids[i]}}
				}
				last, err := st.AppendEvents(ctx, sk("s"), evs)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := st.AppendEvents(ctx, sk("noise"), evs[:1]); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				done = append(done, batch{last, ids})
				mu.Unlock()
			}
		})
	}
	// Appends to a missing session fail alone, whatever runs beside them.
	wg.Go(func() {
		for range batches {
			_, err := st.AppendEvents(ctx, sk("missing"), []store.Event{{Event: wire.Event{Type: wire.EventDone}}})
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("AppendEvents(missing) = %v, want ErrNotFound", err)
				return
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		return
	}

	all := must(st.ReadEvents(ctx, sk("s"), 0, 0))(t)
	seen := map[string]int64{}
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if _, dup := seen[e.Event.ID]; dup {
			t.Fatalf("event %s stored twice", e.Event.ID)
		}
		seen[e.Event.ID] = e.Seq
	}
	total := 0
	for _, b := range done {
		total += len(b.ids)
		for i, id := range b.ids {
			if want := b.last - int64(len(b.ids)-1-i); seen[id] != want {
				t.Fatalf("event %s at seq %d, want %d (batch ending at %d)", id, seen[id], want, b.last)
			}
		}
	}
	equal(t, "events stored", len(all), total)
	equal(t, "LastSeq", must(st.GetSession(ctx, sk("s")))(t).LastSeq, int64(total))
	equal(t, "LastSeq (noise)", must(st.GetSession(ctx, sk("noise")))(t).LastSeq, int64(writers*batches))

	// Paging yields the same sequence.
	var paged []store.Event
	for after := int64(0); ; {
		page := must(st.ReadEvents(ctx, sk("s"), after, 7))(t)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Seq
	}
	equal(t, "paged ReadEvents", paged, all)
}
