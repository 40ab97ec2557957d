package daytona_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// BenchmarkCheckpointRemote: the incremental checkpoint of a 10,000-file
// workspace in a sandbox of the fake (a real sandboxd on loopback, so
// the transfer costs only what the bytes cost here), nothing changed and
// one file changed: through the daemon's watch (a delta back), and with
// a full scan each time (every entry both ways). scan-B/op is what the
// scans moved over the connection.
func BenchmarkCheckpointRemote(b *testing.B) {
	r := newRemoteTree(b, 10_000)
	i := 0
	for _, mode := range []string{"watched", "full-scan"} {
		checkpoint := r.checkpoint
		if mode == "full-scan" {
			checkpoint = r.checkpointFull
		}
		checkpoint(b)
		run := func(name string, change bool) {
			b.Run(mode+"/"+name, func(b *testing.B) {
				var moved int64
				for b.Loop() {
					if change {
						b.StopTimer()
						i++
						if err := os.WriteFile(filepath.Join(r.root, "d042/f04200.txt"), fmt.Appendf(nil, "version %d", i), 0o644); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					st, n := checkpoint(b)
					if change && st.Transferred != 1 || !change && st.Wrote {
						b.Fatalf("checkpoint: %+v", st)
					}
					moved += n
				}
				b.ReportMetric(float64(moved)/float64(b.N), "scan-B/op")
			})
		}
		run("unchanged", false)
		run("one-changed", true)
	}
}
