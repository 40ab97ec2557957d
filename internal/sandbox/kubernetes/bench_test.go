package kubernetes_test

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// The benchmarks against the test cluster (RUNNER_TEST_KUBE), beside the
// Daytona fake's in internal/sandbox/daytona and internal/runner; the
// figures of one run are in docs/benchmarks.md.

// BenchmarkClusterCreate: a cold sandbox, from Create to its daemon
// answering (policy, pod, scheduling, the kubelet's start, the first
// port-forward), then Destroy outside the timer.
func BenchmarkClusterCreate(b *testing.B) {
	p := newProvider(b)
	for b.Loop() {
		sb, err := p.Create(b.Context(), sandbox.Spec{SessionID: "bench-create"})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := sb.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkClusterStartRoundTrip: a process started in a running sandbox
// and one line through it, all through the API server's port-forward.
func BenchmarkClusterStartRoundTrip(b *testing.B) {
	p := newProvider(b)
	sb, err := p.Create(b.Context(), sandbox.Spec{SessionID: "bench-rt"})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	for b.Loop() {
		proc, err := sb.Start(b.Context(), sandbox.Cmd{Path: "cat", Env: sandboxtest.Env(sb)})
		if err != nil {
			b.Fatal(err)
		}
		io.WriteString(proc.Stdin(), "ping\n")
		if _, err := bufio.NewReader(proc.Stdout()).ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		proc.Kill()
		proc.Wait()
	}
}

// BenchmarkClusterParkResume: Pause (the pod deleted, the claim kept)
// outside the timer, then Open (a new pod on the claim, its daemon
// answering) timed.
func BenchmarkClusterParkResume(b *testing.B) {
	p := newProvider(b, parking)
	sb, err := p.Create(b.Context(), sandbox.Spec{SessionID: "bench-park"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { sb.Destroy(context.Background()) }()
	id := sb.Info().ID
	var pause time.Duration
	for b.Loop() {
		b.StopTimer()
		t0 := time.Now()
		if err := sb.(sandbox.Pauser).Pause(b.Context()); err != nil {
			b.Fatal(err)
		}
		pause += time.Since(t0)
		b.StartTimer()
		if sb, err = p.Open(b.Context(), id, sandbox.Spec{SessionID: "bench-park"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pause.Milliseconds())/float64(b.N), "pause-ms/op")
}
