package daytona_test

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
)

// BenchmarkStartRoundTrip measures starting a process in a running
// sandbox and one line through it, over a fake with API latency (which
// this path must not touch: it only talks to the daemon).
func BenchmarkStartRoundTrip(b *testing.B) {
	fake := daytonatest.New(b, daytonatest.Options{Latency: 20 * time.Millisecond})
	p := newProvider(b, fake, nil)
	sb, err := p.Create(b.Context(), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	fake.ResetCalls()
	for b.Loop() {
		proc, err := sb.Start(b.Context(), sandbox.Cmd{Path: "cat", Env: testEnv})
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
	b.StopTimer()
	for _, c := range fake.Calls() {
		if !strings.HasPrefix(c.Route, "/preview/") {
			b.Fatalf("the start path made a Daytona API call: %v", c)
		}
	}
}

// BenchmarkResumeFromStopped measures Pause then Open (start, daemon
// restart, reconnect) over a fake with API latency, and reports the
// Daytona calls each resume makes.
func BenchmarkResumeFromStopped(b *testing.B) {
	fake := daytonatest.New(b, daytonatest.Options{Latency: 20 * time.Millisecond})
	p := newProvider(b, fake, nil)
	sb, err := p.Create(b.Context(), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	id := sb.Info().ID
	calls := 0
	for b.Loop() {
		b.StopTimer()
		if err := sb.(sandbox.Pauser).Pause(b.Context()); err != nil {
			b.Fatal(err)
		}
		fake.ResetCalls()
		b.StartTimer()
		if sb, err = p.Open(b.Context(), id, sandbox.Spec{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		for _, c := range fake.Calls() {
			if !strings.HasPrefix(c.Route, "/preview/") {
				calls++
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(calls)/float64(b.N), "api-calls/op")
}
