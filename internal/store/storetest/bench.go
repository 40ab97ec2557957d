package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// Bench measures event append throughput, reported as events/s, of
// appends fenced as a turn's are (AppendFencedEvents). open
// must return a new, empty store for each sub-benchmark and close it when
// b ends. Sub-benchmarks: one appender with batches of 1, 10 and 100
// events (a batch is one transaction), and 8×GOMAXPROCS parallel
// appenders, each on its own session, with batches of 1 and 10.
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			st := open(b)
			session, gen := newBenchSession(b, st, "s")
			evs := benchEvents(n)
			b.ResetTimer()
			for b.Loop() {
				if _, err := st.AppendFencedEvents(b.Context(), session, gen, evs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("parallel/batch=%d", n), func(b *testing.B) {
			st := open(b)
			var next atomic.Int64
			evs := benchEvents(n)
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				session, gen := newBenchSession(b, st, fmt.Sprintf("s%d", next.Add(1)))
				for pb.Next() {
					if _, err := st.AppendFencedEvents(b.Context(), session, gen, evs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchWriteTurn measures a warm turn's ledger and log writes: its begin,
// the nine events a short text turn logs, and its outcome. one: in one
// TurnWriter.WriteTurnWithEvents (skipped without one); apart: BeginTurn,
// then EndTurn and AppendFencedEvents, as for a store without it. Every
// write is fenced by the lease generation, as a turn's are.
func BenchWriteTurn(b *testing.B, open func(b *testing.B) store.Store) {
	evs := []store.Event{
		{Event: wire.Event{Type: wire.EventMessage, Role: "user", Text: "hello 1"}},
		{Event: wire.Event{Type: wire.EventData, Name: "agent-session", Data: []byte(`{"agentSessionId":"a","mode":"warm","sandbox":"local-1"}`)}},
		{Event: wire.Event{Type: wire.EventMessageStart, ID: "m1"}},
		{Event: wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: "echo: "}},
		{Event: wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: "hello 1"}},
		{Event: wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: "."}},
		{Event: wire.Event{Type: wire.EventMessageEnd, ID: "m1"}},
		{Event: wire.Event{Type: wire.EventMessage, Role: "assistant", Text: "echo: hello 1."}},
		{Event: wire.Event{Type: wire.EventDone, StopReason: "end_turn"}},
	}
	run := func(b *testing.B, write func(st store.Store, begin, end store.Turn) error) {
		st := open(b)
		session, gen := newBenchSession(b, st, "s")
		i := 0
		for b.Loop() {
			i++
			now := time.Now()
			begin := store.Turn{ProjectID: session.ProjectID, SessionID: session.SessionID, Index: i, Harness: "fake", StartedAt: now, Owner: "r", Generation: gen}
			end := begin
			end.Status, end.EndedAt, end.StopReason = store.TurnCompleted, now, "end_turn"
			if err := write(st, begin, end); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("one", func(b *testing.B) {
		run(b, func(st store.Store, begin, end store.Turn) error {
			tw, ok := st.(store.TurnWriter)
			if !ok {
				b.Skip("the store has no TurnWriter")
			}
			_, _, err := tw.WriteTurnWithEvents(b.Context(), begin, evs, end)
			return err
		})
	})
	b.Run("apart", func(b *testing.B) {
		run(b, func(st store.Store, begin, end store.Turn) error {
			if _, err := st.BeginTurn(b.Context(), begin); err != nil {
				return err
			}
			if _, err := st.EndTurn(b.Context(), end); err != nil {
				return err
			}
			_, err := st.AppendFencedEvents(b.Context(), begin.Key(), begin.Generation, evs)
			return err
		})
	})
}

// newBenchSession creates session id, leased as a turn's writer holds
// it, and returns its key and the lease generation its writes carry.
func newBenchSession(b *testing.B, st store.Store, id string) (store.SessionKey, int64) {
	l, err := st.AcquireLease(b.Context(), sk(id), "r", time.Now(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.PutSession(b.Context(), store.Session{ID: id, Status: store.SessionActive, Generation: l.Generation}); err != nil {
		b.Fatal(err)
	}
	return sk(id), l.Generation
}

// benchEvents is n streamed text deltas, the most common event.
func benchEvents(n int) []store.Event {
	evs := make([]store.Event, n)
	for i := range evs {
		evs[i] = store.Event{TurnIndex: 3, Time: time.Now(), Event: wire.Event{
			Type: wire.EventMessageDelta, ID: "msg_01HZX3K6Q9V2",
			Delta: fmt.Sprintf("token %d of a reply that streams a few words at a time, ", i),
		}}
	}
	return evs
}
