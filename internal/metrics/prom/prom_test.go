package prom_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/metrics/prom"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type state struct{ err error }

func (state) InFlight() int { return 2 }
func (state) Pools() []metrics.Pool {
	return []metrics.Pool{{Provider: "daytona", Warm: 3, Awaiting: 1, Capacity: 5}}
}
func (s state) Sandboxes() ([]metrics.SandboxCount, error) {
	return []metrics.SandboxCount{{Provider: "daytona", State: "paused", N: 4}}, s.err
}

// TestHooks: what the other parts of the runner report (platform calls,
// checkpoints) and the scrape-time gauges appear under their names.
func TestHooks(t *testing.T) {
	m := prom.New()
	m.Watch(state{err: errors.New("store down")})
	var p metrics.Platform = m
	var c metrics.Checkpoints = m
	p.PlatformCall("sessions.put", nil)
	p.PlatformCall("sessions.put", errors.New("502"))
	c.Checkpoint("save", 1500*time.Millisecond, nil)
	c.Checkpoint("restore", time.Second, errors.New("no such key"))
	m.Approval("asked", "policy")

	want := `
# HELP agenta_runner_platform_call_failures_total Calls to the Agenta platform that failed, by operation.
# TYPE agenta_runner_platform_call_failures_total counter
agenta_runner_platform_call_failures_total{op="sessions.put"} 1
# HELP agenta_runner_platform_calls_total Calls to the Agenta platform, by operation.
# TYPE agenta_runner_platform_calls_total counter
agenta_runner_platform_calls_total{op="sessions.put"} 2
# HELP agenta_runner_pool_awaiting_approval Warm sessions parked waiting for a person's approval, by provider.
# TYPE agenta_runner_pool_awaiting_approval gauge
agenta_runner_pool_awaiting_approval{provider="daytona"} 1
# HELP agenta_runner_sandboxes Sandboxes the shared store records as not destroyed, by provider and state (all replicas on the store).
# TYPE agenta_runner_sandboxes gauge
agenta_runner_sandboxes{provider="daytona",state="paused"} 4
# HELP agenta_runner_scrape_errors_total Scrapes that could not read the sandbox counts from the store.
# TYPE agenta_runner_scrape_errors_total counter
agenta_runner_scrape_errors_total 1
`
	names := []string{"agenta_runner_platform_call_failures_total", "agenta_runner_platform_calls_total",
		"agenta_runner_pool_awaiting_approval", "agenta_runner_sandboxes", "agenta_runner_scrape_errors_total"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.Registry(), "agenta_runner_checkpoint_duration_seconds"); n != 2 {
		t.Fatalf("checkpoint series: %d, want 2 (save ok, restore error)", n)
	}
}
