package tenanttest

import (
	"sort"
	"testing"
	"time"
)

// BenchmarkForwardedWarmTurn: what forwarding adds to a warm turn. Two
// `runner serve` replicas on one PostgreSQL; one session, warm on the
// first. Each iteration streams one turn to the owner (direct) and one to
// the other replica, which forwards it to the owner (forwarded), the two
// interleaved so that load moves both alike. Reported: p50 and p99 of
// each, and added-p50-ms (forwarded minus direct at p50).
func BenchmarkForwardedWarmTurn(b *testing.B) {
	rs, _ := peerCluster(b, 2)
	owner, other := rs[0], rs[1]
	req := fake("say ok", map[string]any{"sessionId": "bench", "projectId": "p"})
	turn := func(r *runner) time.Duration {
		start := time.Now()
		tr := r.client.Stream(b, req)
		d := time.Since(start)
		if tr.Status != 200 || !tr.Result.OK {
			b.Fatalf("turn on %s: %d %s", r.Base, tr.Status, tr.Raw)
		}
		return d
	}
	for range 20 { // the session warm on the owner, connections open
		turn(owner)
		turn(other)
	}
	var direct, forwarded []time.Duration
	for b.Loop() {
		direct = append(direct, turn(owner))
		forwarded = append(forwarded, turn(other))
	}
	p := func(ds []time.Duration, q int) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[(len(ds)*q)/100]) / float64(time.Millisecond)
	}
	b.ReportMetric(p(direct, 50), "direct-p50-ms")
	b.ReportMetric(p(direct, 99), "direct-p99-ms")
	b.ReportMetric(p(forwarded, 50), "forwarded-p50-ms")
	b.ReportMetric(p(forwarded, 99), "forwarded-p99-ms")
	b.ReportMetric(p(forwarded, 50)-p(direct, 50), "added-p50-ms")
}
