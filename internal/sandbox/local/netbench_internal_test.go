package local

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
)

// BenchmarkNetworkSetup measures what network "on" adds to a sandbox's
// start, from the process's own timings: slirp4netns and what is left of
// the table's installer once bwrap finished its setup (the installer starts
// while bwrap still works). The baseline in the same run is a whole cold
// sandbox with network "off".
//
//	go test -run '^$' -bench NetworkSetup -benchtime 100x ./internal/sandbox/local
func BenchmarkNetworkSetup(b *testing.B) {
	if _, err := exec.LookPath("slirp4netns"); err != nil {
		b.Skip("slirp4netns not installed")
	}
	cfg := Config{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	if os.Geteuid() != 0 {
		cfg.MemoryMB, cfg.Pids, cfg.CPUs, cfg.DiskMB = NoLimit, NoLimit, NoLimit, NoLimit
	}
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if p.net == nil {
		b.Fatalf("no isolated network: %v", p.netErr)
	}
	ctx := context.Background()
	start := func(mode string) (*process, time.Duration) {
		t0 := time.Now()
		sb, err := p.Create(ctx, sandbox.Spec{Network: sandbox.Network{Mode: mode}})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Destroy(ctx)
		proc, err := sb.Start(ctx, sandbox.Cmd{Path: "/bin/true"})
		if err != nil {
			b.Fatal(err)
		}
		if err := proc.Wait(); err != nil {
			b.Fatal(err)
		}
		return proc.(*process), time.Since(t0)
	}
	var setup, off []time.Duration
	for b.Loop() {
		proc, _ := start("on")
		// What comes on top: slirp4netns and what is left of the
		// installer once bwrap is done (the wait for bwrap is its own).
		t := proc.net.Timings()
		setup = append(setup, t[1]+t[2])
		b.StopTimer()
		_, d := start("off")
		off = append(off, d)
		b.StartTimer()
	}
	q := func(ds []time.Duration, p int) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[(len(s)-1)*p/100]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(setup, 50), "setup-p50-ms")
	b.ReportMetric(q(setup, 95), "setup-p95-ms")
	b.ReportMetric(q(off, 50), "sandbox-off-p50-ms")
}
