// Package prom implements the metrics hooks with the Prometheus client
// library and serves them in the text exposition format (Handler). One
// Registry backs the turn Observer, the Platform and Checkpoints hooks and
// the scrape-time gauges read from a metrics.State.
//
// Series (all prefixed agenta_runner_):
//
//	turn_duration_seconds{harness,provider,outcome,start}   histogram
//	turn_first_event_seconds{harness,provider,start}        histogram
//	turns_total{harness,provider,outcome,start}             (the histogram's _count)
//	tool_calls_total{harness,provider}                      counter
//	approvals_total{outcome,decided_by}                     counter
//	platform_calls_total{op}, platform_call_failures_total{op}  counters
//	checkpoint_duration_seconds{op,outcome}                 histogram
//	turns_in_flight                                         gauge
//	pool_warm_sessions{provider}, pool_awaiting_approval{provider},
//	pool_capacity{provider}                                 gauges
//	sandboxes{provider,state}                               gauge (from the store)
//	scrape_errors_total{source}                             counter
//
// plus the Go runtime and process collectors.
package prom

import (
	"net/http"
	"time"

	"github.com/agentrunner/runner/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "agenta_runner"

// Turn durations run from a warm one-liner (well under a second) to long
// agent runs (an hour is the default total limit).
var turnBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// First events arrive in milliseconds warm, seconds cold (a sandbox and a
// harness start).
var firstBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}

var checkpointBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// Metrics is the Prometheus implementation of every metrics hook.
type Metrics struct {
	reg *prometheus.Registry

	turn        *prometheus.HistogramVec
	first       *prometheus.HistogramVec
	toolCalls   *prometheus.CounterVec
	approvals   *prometheus.CounterVec
	platform    *prometheus.CounterVec
	platformErr *prometheus.CounterVec
	checkpoint  *prometheus.HistogramVec
}

var (
	_ metrics.Observer    = (*Metrics)(nil)
	_ metrics.Platform    = (*Metrics)(nil)
	_ metrics.Checkpoints = (*Metrics)(nil)
)

// New returns the metrics over a fresh registry. Watch adds the gauges.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.turn = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "turn_duration_seconds",
		Help:    "Turn duration from admission to result, by harness, provider, outcome (completed, paused, cancelled, failed) and start (warm, cold).",
		Buckets: turnBuckets,
	}, []string{"harness", "provider", "outcome", "start"})
	m.first = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "turn_first_event_seconds",
		Help:    "Time from a turn's admission to its harness's first event, by harness, provider and start (warm, cold).",
		Buckets: firstBuckets,
	}, []string{"harness", "provider", "start"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "tool_calls_total",
		Help: "Tool calls the harnesses reported, by harness and provider.",
	}, []string{"harness", "provider"})
	m.approvals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "approvals_total",
		Help: "Permission decisions, by outcome (allowed, denied, asked) and who decided (policy, user, runner).",
	}, []string{"outcome", "decided_by"})
	m.platform = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "platform_calls_total",
		Help: "Calls to the Agenta platform, by operation.",
	}, []string{"op"})
	m.platformErr = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "platform_call_failures_total",
		Help: "Calls to the Agenta platform that failed, by operation.",
	}, []string{"op"})
	m.checkpoint = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "checkpoint_duration_seconds",
		Help:    "Workspace checkpoint operations against the store, by operation and outcome (ok, error).",
		Buckets: checkpointBuckets,
	}, []string{"op", "outcome"})
	m.reg.MustRegister(m.turn, m.first, m.toolCalls, m.approvals, m.platform, m.platformErr, m.checkpoint,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Watch adds the gauges read from state at every scrape. The runner's
// Service is the State; it is built with the Metrics as its Observer, so
// it comes second. Call it once.
func (m *Metrics) Watch(state metrics.State) {
	m.reg.MustRegister(newStateCollector(state))
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is the registry, for tests and for callers adding their own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) TurnEnded(t metrics.Turn) {
	m.turn.WithLabelValues(t.Harness, t.Provider, t.Outcome, string(t.Start)).Observe(t.Duration.Seconds())
}

func (m *Metrics) FirstEvent(harness, provider string, start metrics.Start, d time.Duration) {
	m.first.WithLabelValues(harness, provider, string(start)).Observe(d.Seconds())
}

func (m *Metrics) ToolCall(harness, provider string) {
	m.toolCalls.WithLabelValues(harness, provider).Inc()
}

func (m *Metrics) Approval(outcome, by string) {
	m.approvals.WithLabelValues(outcome, by).Inc()
}

func (m *Metrics) PlatformCall(op string, err error) {
	m.platform.WithLabelValues(op).Inc()
	if err != nil {
		m.platformErr.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) Checkpoint(op string, d time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.checkpoint.WithLabelValues(op, outcome).Observe(d.Seconds())
}
