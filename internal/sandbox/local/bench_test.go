package local_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
)

// BenchmarkColdSandbox measures a cold sandbox: Create, Start /bin/true,
// Wait (Destroy runs outside the measurement), and in the same run a plain
// fork/exec of /bin/true, reporting p50 and p99 of both.
//
//	go test -run '^$' -bench ColdSandbox -benchtime 300x ./internal/sandbox/local
func BenchmarkColdSandbox(b *testing.B) {
	for _, bc := range []struct {
		name    string
		network string
		cfg     func(*local.Config)
	}{
		{"bwrap/network=on", "on", nil},
		{"bwrap/network=on/host", "on", func(c *local.Config) { c.Network = local.NetworkHost }},
		{"bwrap/network=off", "off", nil},
		{"bwrap/network=allowlist", "allowlist", nil},
		{"bwrap/allowlist-proxy-only", "allowlist", func(c *local.Config) { c.Slirp4netns = "/nonexistent" }},
		{"bwrap/network=off/nolimits", "off", func(c *local.Config) {
			c.MemoryMB, c.Pids, c.CPUs, c.DiskMB = local.NoLimit, local.NoLimit, local.NoLimit, local.NoLimit
		}},
		{"bwrap/network=off/sandbox-uid", "off", func(c *local.Config) { c.SandboxUID = 65534 }},
		{"none", "on", func(c *local.Config) { c.Isolation = local.IsolationNone }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if strings.HasSuffix(bc.name, "sandbox-uid") && os.Geteuid() != 0 {
				b.Skip("a sandbox uid needs root")
			}
			p := newBwrap(b, func(c *local.Config) {
				c.Logger = slog.New(slog.DiscardHandler)
				if bc.cfg != nil {
					bc.cfg(c)
				}
			})
			ctx := context.Background()
			var sandboxes, plain []time.Duration
			for b.Loop() {
				start := time.Now()
				sb, err := p.Create(ctx, sandbox.Spec{Network: sandbox.Network{Mode: bc.network, Allow: []string{"example.com"}}})
				if err != nil {
					b.Fatal(err)
				}
				proc, err := sb.Start(ctx, sandbox.Cmd{Path: "/bin/true"})
				if err != nil {
					b.Fatal(err)
				}
				if err := proc.Wait(); err != nil {
					b.Fatalf("%v: %s", err, proc.StderrTail())
				}
				sandboxes = append(sandboxes, time.Since(start))
				b.StopTimer()
				if err := sb.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
				// The baseline, interleaved so both see the same machine load.
				start = time.Now()
				if err := exec.Command("/bin/true").Run(); err != nil {
					b.Fatal(err)
				}
				plain = append(plain, time.Since(start))
				b.StartTimer()
			}
			report(b, "sandbox", sandboxes)
			report(b, "forkexec", plain)
			b.ReportMetric(ms(pct(sandboxes, 50)-pct(plain, 50)), "overhead-p50-ms")
		})
	}
}

func report(b *testing.B, name string, ds []time.Duration) {
	b.ReportMetric(ms(pct(ds, 50)), name+"-p50-ms")
	b.ReportMetric(ms(pct(ds, 99)), name+"-p99-ms")
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
