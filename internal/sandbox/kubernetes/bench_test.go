package kubernetes_test

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/kubernetes"
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
		roundTrip(b, sb)
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

// BenchmarkClusterRuntimes: runc (the cluster's default) and gVisor (the
// gvisor RuntimeClass) side by side, interleaved in each iteration so both
// see the same load: a cold Create to the daemon answering, then a process
// started and one line through it in a sandbox made before the loop.
// Destroy is outside the figures.
func BenchmarkClusterRuntimes(b *testing.B) {
	runtimes := []struct {
		name  string
		class string
	}{{"runc", ""}, {"gvisor", gvisorClass}}
	f := figures{}
	warm := map[string]sandbox.Sandbox{}
	providers := map[string]*kubernetes.Provider{}
	for _, r := range runtimes {
		providers[r.name] = newProvider(b, func(c *kubernetes.Config) { c.RuntimeClassName = r.class })
		sb, err := providers[r.name].Create(b.Context(), sandbox.Spec{SessionID: "bench-runtime-rt"})
		if err != nil {
			b.Fatalf("%s: %v", r.name, err)
		}
		defer sb.Destroy(context.Background())
		warm[r.name] = sb
	}
	for b.Loop() {
		for _, r := range runtimes {
			t0 := time.Now()
			sb, err := providers[r.name].Create(b.Context(), sandbox.Spec{SessionID: "bench-runtime-create"})
			if err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			f.add(r.name+"-create", time.Since(t0))
			b.StopTimer()
			if err := sb.Destroy(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			t0 = time.Now()
			roundTrip(b, warm[r.name])
			f.add(r.name+"-start-rt", time.Since(t0))
		}
	}
	f.report(b)
}

// roundTrip starts cat in sb and sends one line through it.
func roundTrip(b *testing.B, sb sandbox.Sandbox) {
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
