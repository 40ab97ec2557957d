package agenta_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/platform/agenta"
	"github.com/agentrunner/runner/internal/platform/platformtest"
	"github.com/agentrunner/runner/internal/wire"
)

// BenchmarkMirrorCriticalPath is what platform mode adds to a turn's
// critical path: Begin, the events of a small turn and End, as the turn
// calls them (the platform calls themselves run on the mirror's queue).
// The baseline is the same calls on an observer that does nothing.
func BenchmarkMirrorCriticalPath(b *testing.B) {
	f := platformtest.New(b, "Secret bench")
	req := &wire.Request{SessionID: "bench", Messages: []wire.Message{{Role: "user", Content: wire.MessageContent{Text: "hello", IsText: true}}},
		Telemetry: []byte(`{"exporters":{"otlp":{"endpoint":"` + f.URL + `/otlp/v1/traces","headers":{"authorization":"Secret bench"}}}}`)}
	events := []wire.Event{
		{Type: wire.EventMessageStart, ID: "m1"}, {Type: wire.EventMessageDelta, ID: "m1", Delta: "hello "}, {Type: wire.EventMessageDelta, ID: "m1", Delta: "there"},
		{Type: wire.EventMessageEnd, ID: "m1"}, {Type: wire.EventToolCall, ID: "c1", Name: "Read", Input: []byte(`{"path":"x"}`)},
		wire.ToolResultEvent("c1", "data", nil, false), {Type: wire.EventDone, StopReason: "end_turn"},
	}
	run := func(b *testing.B, o platform.Observer) {
		for b.Loop() {
			to := o.Begin(context.Background(), platform.TurnBegin{Request: req, SessionID: "bench", TurnID: "t", Harness: "fake", Fresh: true, UserText: "hello", Stop: func(error) {}})
			for _, ev := range events {
				to.Event(ev)
			}
			to.End(platform.TurnEnd{StopReason: "end_turn"})
		}
	}
	b.Run("baseline-noop-observer", func(b *testing.B) { run(b, noop{}) })
	// With the platform answering, the mirror's queue works beside the
	// turn (on this machine: the same two cores); with it unreachable the
	// calls wait in the queue, and what is left is the path itself.
	b.Run("platform-mirror", func(b *testing.B) {
		m := agenta.NewMirror(agenta.Config{ReplicaID: "bench", HeartbeatInterval: time.Hour, QueueMax: 1 << 30})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = m.Close(ctx)
		}()
		run(b, m)
	})
	b.Run("platform-mirror-queued", func(b *testing.B) {
		m := agenta.NewMirror(agenta.Config{Base: "http://127.0.0.1:1", ReplicaID: "bench", HeartbeatInterval: time.Hour, QueueMax: 1 << 30, RetryBase: time.Hour})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			_ = m.Close(ctx) // the queued calls are dropped: nothing is listening
		}()
		run(b, m)
	})
}

type noop struct{}

func (noop) Begin(context.Context, platform.TurnBegin) platform.TurnObserver { return noop{} }
func (noop) Event(wire.Event)                                                {}
func (noop) End(platform.TurnEnd)                                            {}
