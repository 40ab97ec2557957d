package tenanttest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkReplicas1000Sessions: 1,000 sessions across 3 `runner serve`
// replicas on one PostgreSQL, every turn sent to a replica picked at
// random (a balancer that knows nothing of sessions): a session's first
// turn starts its harness where it lands, its later turns are forwarded
// there, warm. b.N turns in all, 64 in flight, the sessions taken in
// turn; any failed turn fails the benchmark. Reported: per-turn p50 and
// p99, of all turns and of first (cold) and later turns apart, how many
// later turns were not warm, and each replica's peak RSS (VmHWM).
func BenchmarkReplicas1000Sessions(b *testing.B) {
	const sessions, inFlight = 1000, 64
	rs, _ := peerCluster(b, 3,
		"AGENTA_RUNNER_LOG_LEVEL=warn",
		fmt.Sprintf("AGENTA_RUNNER_SESSION_POOL_MAX=%d", sessions),
		"AGENTA_RUNNER_SESSION_TTL_MS=1800000")
	var (
		mu           sync.Mutex
		cold, warm   []time.Duration // a session's first turn; its later ones
		fails, cold2 int             // failed turns; later turns not warm
		first        string
		began        = make([]bool, sessions)
	)
	// One session has at most one turn in flight: a session is taken
	// from idle and given back when its turn ends.
	idle := make(chan int, sessions)
	for s := range sessions {
		idle <- s
	}
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	rnd := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		sem <- struct{}{}
		s := <-idle
		r := rs[rnd.IntN(len(rs))]
		later := began[s]
		began[s] = true
		wg.Go(func() {
			defer func() { idle <- s; <-sem }()
			start := time.Now()
			tr := r.client.Stream(b, fake("say ok", map[string]any{"sessionId": fmt.Sprintf("s%04d", s), "projectId": "p"}))
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if later {
				warm = append(warm, d)
				if !strings.Contains(string(tr.Raw), `"mode":"warm"`) {
					cold2++
				}
			} else {
				cold = append(cold, d)
			}
			if tr.Status != 200 || !tr.Result.OK {
				fails++
				if first == "" {
					first = fmt.Sprintf("session s%04d on %s: %d %s", s, r.Base, tr.Status, tr.Raw)
				}
			}
		})
	}
	wg.Wait()
	if fails > 0 {
		b.Fatalf("%d of %d turns failed; the first: %s", fails, len(cold)+len(warm), first)
	}
	all := append(append([]time.Duration(nil), cold...), warm...)
	for _, q := range []struct {
		name string
		ds   []time.Duration
	}{{"", all}, {"cold-", cold}, {"warm-", warm}} {
		if len(q.ds) == 0 {
			continue
		}
		sort.Slice(q.ds, func(i, j int) bool { return q.ds[i] < q.ds[j] })
		ms := func(p int) float64 { return float64(q.ds[len(q.ds)*p/100]) / float64(time.Millisecond) }
		b.ReportMetric(ms(50), q.name+"p50-ms")
		b.ReportMetric(ms(99), q.name+"p99-ms")
	}
	b.ReportMetric(float64(cold2), "later-turns-not-warm")
	for i, r := range rs {
		_, hwm := r.memory(b)
		b.ReportMetric(float64(hwm)/(1<<20), fmt.Sprintf("replica%d-peak-rss-MB", i))
	}
}
