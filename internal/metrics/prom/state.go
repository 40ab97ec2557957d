package prom

import (
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reads the gauges from the runner at scrape time, so the
// turn path never updates them.
type stateCollector struct {
	state     metrics.State
	inFlight  *prometheus.Desc
	warm      *prometheus.Desc
	awaiting  *prometheus.Desc
	capacity  *prometheus.Desc
	sandboxes *prometheus.Desc
	prewarm   *prometheus.Desc
	hits      *prometheus.Desc
	misses    *prometheus.Desc
	errors    prometheus.Counter
}

func newStateCollector(s metrics.State) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &stateCollector{
		state:     s,
		inFlight:  d("turns_in_flight", "Turns running on this replica now."),
		warm:      d("pool_warm_sessions", "Sessions this replica keeps warm (harness and sandbox alive), by provider.", "provider"),
		awaiting:  d("pool_awaiting_approval", "Warm sessions parked waiting for a person's approval, by provider.", "provider"),
		capacity:  d("pool_capacity", "Most sessions the provider's warm pool keeps (AGENTA_RUNNER_SESSION_POOL_MAX or the provider's own setting).", "provider"),
		prewarm:   d("prewarm_slots", "Pre-warmed slots by harness, provider and state (ready, claimed, refilling).", "harness", "provider", "state"),
		hits:      d("prewarm_hits_total", "New sessions that took a pre-warmed slot.", "harness", "provider"),
		misses:    d("prewarm_misses_total", "New sessions that could have taken a pre-warmed slot and ran cold, by reason.", "harness", "provider", "reason"),
		sandboxes: d("sandboxes", "Sandboxes the shared store records as not destroyed, by provider and state (all replicas on the store).", "provider", "state"),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "scrape_errors_total",
			Help: "Scrapes that could not read the sandbox counts from the store.",
		}),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.warm
	ch <- c.awaiting
	ch <- c.capacity
	ch <- c.sandboxes
	ch <- c.prewarm
	ch <- c.hits
	ch <- c.misses
	c.errors.Describe(ch)
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(c.state.InFlight()))
	for _, p := range c.state.Pools() {
		ch <- prometheus.MustNewConstMetric(c.warm, prometheus.GaugeValue, float64(p.Warm), p.Provider)
		ch <- prometheus.MustNewConstMetric(c.awaiting, prometheus.GaugeValue, float64(p.Awaiting), p.Provider)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(p.Capacity), p.Provider)
	}
	if ps, ok := c.state.(metrics.PrewarmState); ok {
		for _, p := range ps.PrewarmShapes() {
			for state, n := range map[string]int{"ready": p.Ready, "claimed": p.Claimed, "refilling": p.Refilling} {
				ch <- prometheus.MustNewConstMetric(c.prewarm, prometheus.GaugeValue, float64(n), p.Harness, p.Provider, state)
			}
			ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(p.Hits), p.Harness, p.Provider)
			for reason, n := range p.Misses {
				ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(n), p.Harness, p.Provider, reason)
			}
		}
	}
	counts, err := c.state.Sandboxes()
	if err != nil {
		c.errors.Inc()
	}
	for _, s := range counts {
		ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(s.N), s.Provider, s.State)
	}
	c.errors.Collect(ch)
}
