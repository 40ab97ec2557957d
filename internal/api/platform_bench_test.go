package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/platform/agenta"
	"github.com/agentrunner/runner/internal/platform/platformtest"
)

// BenchmarkWarmTurnPlatform: a warm turn over HTTP for a request that
// carries Agenta's platform credential, with the platform mirror off
// (the baseline) and on (heartbeats, records, ledger queued per turn to
// a fake platform on loopback).
func BenchmarkWarmTurnPlatform(b *testing.B) {
	f := platformtest.New(b, "Secret bench")
	// "on" has the fake platform in this process, its HTTP work beside the
	// turn on this Go scheduler; "on-process" has it in a process of its
	// own, as the real platform is; "on-queued" has the platform
	// unreachable, so the calls wait in the queue and what is measured is
	// the turn's own path with the mirror in it.
	bases := map[string]string{"on": f.URL, "on-process": platformtest.ServeProcess(b, "Secret bench")}
	for _, mode := range []string{"off", "on", "on-process", "on-queued"} {
		b.Run("platform-"+mode, func(b *testing.B) {
			base := bases[mode]
			if base == "" {
				base = f.URL // off and on-queued: the request still names a platform
			}
			body := sessionBody("bench-platform-"+mode, "fake", "hello", `"telemetry":{"exporters":{"otlp":{"endpoint":"`+base+`/otlp/v1/traces","headers":{"authorization":"Secret bench"}}}}`)
			var obs []platform.Observer
			var m *agenta.Mirror
			if mode != "off" {
				cfg := agenta.Config{ReplicaID: testReplica, QueueMax: 1 << 30}
				if mode == "on-queued" {
					cfg.Base, cfg.RetryBase = "http://127.0.0.1:1", time.Hour
				}
				m = agenta.NewMirror(cfg)
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
			if m == nil {
				return
			}
			wait := time.Minute
			if mode == "on-queued" {
				wait = time.Millisecond // nothing listens: the queued calls are dropped
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_ = m.Close(ctx)
			if st := m.Stats(); mode != "on-queued" && st.Sent == 0 {
				b.Fatalf("the mirror delivered nothing to the platform: %+v", st)
			}
		})
	}
	if n := len(f.CallsTo("/sessions/records/ingest")); n == 0 {
		b.Fatal("the mirror sent no records")
	}
}
