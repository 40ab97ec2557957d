package kubernetes_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
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

// BenchmarkClusterServeTurn: turns of the scripted agent through a
// `runner serve` whose sandboxes are pods: cold (a new session each time:
// a pod made, the harness started) and warm (the same session: its pod
// and agent reused). first-token-ms is the request to the first message
// delta; p50/p99 are the whole turn's.
func BenchmarkClusterServeTurn(b *testing.B) {
	s := startServe(b)
	for _, mode := range []string{"cold", "warm"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "warm" {
				s.timedTurn(b, "bench-warm") // the pod made outside the figures
			}
			var first, whole []time.Duration
			for i := 0; b.Loop(); i++ {
				session := "bench-warm"
				if mode == "cold" {
					session = fmt.Sprintf("bench-cold-%d-%d", time.Now().UnixNano(), i)
				}
				f, w := s.timedTurn(b, session)
				first, whole = append(first, f), append(whole, w)
			}
			report(b, "first-token", first)
			report(b, "turn", whole)
		})
	}
}

// timedTurn runs one "say" turn and returns the time to its first message
// delta and to its end.
func (s *serve) timedTurn(b *testing.B, session string) (first, whole time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	resp := s.client.Do(b, ctx, "POST", "/stream", fakeTurn(session, "say benchmark"), "application/x-ndjson")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	ok := false
	for sc.Scan() {
		line := sc.Bytes()
		if first == 0 && strings.Contains(string(line), `"message_delta"`) {
			first = time.Since(start)
		}
		var r struct {
			Result *struct {
				OK    bool   `json:"ok"`
				Error string `json:"error"`
			} `json:"result"`
		}
		if json.Unmarshal(line, &r) == nil && r.Result != nil {
			ok = r.Result.OK
			if !ok {
				b.Fatalf("turn of %s: %s", session, r.Result.Error)
			}
		}
	}
	if !ok {
		b.Fatalf("turn of %s: no result (%v); log:\n%s", session, sc.Err(), s.log)
	}
	return first, time.Since(start)
}

func report(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), name+"-p50-ms")
	b.ReportMetric(ms(0.99), name+"-p99-ms")
}
