package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/platform/agenta"
	"github.com/agentrunner/runner/internal/platform/platformtest"
	"github.com/agentrunner/runner/internal/runner"
)

// BenchmarkWarmTurnPlatform: a warm turn over HTTP for a request that
// carries Agenta's platform credential, with the platform mirror off
// (the baseline) and on (heartbeats, records, ledger queued per turn to
// a fake platform on loopback).
func BenchmarkWarmTurnPlatform(b *testing.B) {
	f := platformtest.New(b, "Secret bench")
	body := sessionBody("bench-platform", "fake", "hello", `"telemetry":{"exporters":{"otlp":{"endpoint":"`+f.URL+`/otlp/v1/traces","headers":{"authorization":"Secret bench"}}}}`)
	// "on" works beside the turn on the same cores (the fake platform and
	// the mirror's queue are in this process); "on-queued" has the
	// platform unreachable, so the calls wait in the queue and what is
	// measured is the turn's own path with the mirror in it.
	for _, mode := range []string{"off", "on", "on-queued"} {
		b.Run("platform-"+mode, func(b *testing.B) {
			var obs []runner.Observer
			if mode != "off" {
				cfg := agenta.Config{ReplicaID: "bench", QueueMax: 1 << 30}
				if mode == "on-queued" {
					cfg.Base, cfg.RetryBase = "http://127.0.0.1:1", time.Hour
				}
				m := agenta.NewMirror(cfg)
				b.Cleanup(func() {
					wait := time.Minute
					if mode == "on-queued" {
						wait = time.Millisecond // nothing listens: the queued calls are dropped
					}
					ctx, cancel := context.WithTimeout(context.Background(), wait)
					defer cancel()
					_ = m.Close(ctx)
				})
				obs = append(obs, m)
			}
			e := newEnvObserved(b, "none", obs)
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				postRun(b, e.srv.URL, body)
				ds = append(ds, time.Since(start))
			}
			if len(ds) > 1 {
				reportPercentiles(b, ds[1:], "")
			}
		})
	}
	if n := len(f.CallsTo("/sessions/records/ingest")); n == 0 {
		b.Fatal("the mirror sent no records")
	}
}
