package prom_test

import (
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/metrics/prom"
)

// observeTurn is what the turn path reports for one turn with a tool call.
func observeTurn(o metrics.Observer) {
	o.FirstEvent("claude", "local", metrics.StartWarm, 40*time.Millisecond)
	o.ToolCall("claude", "local")
	o.Approval("allowed", "policy")
	o.TurnEnded(metrics.Turn{Harness: "claude", Provider: "local", Outcome: metrics.OutcomeCompleted, Start: metrics.StartWarm, Duration: 2 * time.Second})
}

// BenchmarkTurnMetrics: the cost metrics add to one turn, against Nop (no
// metrics) as the baseline in the same run.
func BenchmarkTurnMetrics(b *testing.B) {
	b.Run("nop", func(b *testing.B) {
		var o metrics.Observer = metrics.Nop{}
		b.ReportAllocs()
		for b.Loop() {
			observeTurn(o)
		}
	})
	b.Run("prometheus", func(b *testing.B) {
		var o metrics.Observer = prom.New()
		b.ReportAllocs()
		for b.Loop() {
			observeTurn(o)
		}
	})
}
