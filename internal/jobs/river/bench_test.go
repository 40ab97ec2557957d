package river

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store/storetest"
	"github.com/agentrunner/runner/internal/wire"
)

// benchService is a runner over unconfined local sandboxes and SQLite
// with the scripted fake agent: every job's turn is a cold one in a new
// session, as a job without a sessionId is.
func benchService(b *testing.B) *runner.Service {
	b.Helper()
	p, err := local.New(local.Config{Dir: b.TempDir(), Isolation: "none", MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit, DiskMB: local.NoLimit})
	if err != nil {
		b.Fatal(err)
	}
	return runnertest.Service(b, runner.Config{Version: "bench", DefaultProvider: "local",
		Harnesses: map[string]agent.Spec{"fake": runnertest.Fake()}, BaseEnv: []string{"PATH=/usr/bin:/bin"},
		Logger: runnertest.Logger(b)}, []sandbox.Provider{p}, runnertest.SQLite(b))
}

func benchQueue(b *testing.B, backend string, svc *runner.Service) *Queue {
	b.Helper()
	cfg := Config{Replica: "bench", Concurrency: 4, Poll: 20 * time.Millisecond, Logger: runnertest.Logger(b)}
	var q *Queue
	var err error
	if backend == "postgres" {
		q, err = OpenPostgres(b.Context(), storetest.PostgresSchema(b), cfg, svc)
	} else {
		q, err = OpenSQLite(b.Context(), filepath.Join(b.TempDir(), "jobs.db"), cfg, svc)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Stop(context.Background()) })
	return q
}

func sayRequest(text string) *wire.Request {
	return &wire.Request{Harness: "fake", Messages: []wire.Message{{Role: "user", Content: wire.MessageContent{Text: text}}}}
}

// BenchmarkQueueBacklog: RUNNER_BENCH_JOBS jobs (10,000) queued at once,
// then the queue started: jobs/s sustained to the last one's end, and
// each job's queue latency (enqueue to its turn's start), which a backlog
// of this size makes mostly waiting for a worker.
func BenchmarkQueueBacklog(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("RUNNER_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			if backend == "postgres" && os.Getenv(storetest.PostgresURLEnv) == "" {
				b.Skip(storetest.PostgresURLEnv + " not set")
			}
			for b.Loop() {
				q := benchQueue(b, backend, benchService(b))
				start := time.Now()
				for i := range n {
					if _, _, err := q.Submit(b.Context(), jobs.Spec{Request: sayRequest(fmt.Sprintf("say job %d", i))}); err != nil {
						b.Fatal(err)
					}
				}
				enqueued := time.Since(start)
				if err := q.Start(b.Context()); err != nil {
					b.Fatal(err)
				}
				recs := waitAll(b, q, n)
				wall := time.Since(start)
				var lat []time.Duration
				for _, r := range recs {
					if r.Status != jobs.Succeeded || len(r.Attempts) == 0 {
						b.Fatalf("job %s: %s", r.ID, r.Status)
					}
					lat = append(lat, r.Attempts[0].StartedAt.Sub(r.CreatedAt))
				}
				slices.Sort(lat)
				b.ReportMetric(float64(n)/wall.Seconds(), "jobs/s")
				b.ReportMetric(float64(n)/enqueued.Seconds(), "enqueued/s")
				b.ReportMetric(msOf(lat[len(lat)/2]), "queue-p50-ms")
				b.ReportMetric(msOf(lat[len(lat)*99/100]), "queue-p99-ms")
			}
		})
	}
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// waitAll waits until n jobs ended and returns them.
func waitAll(b *testing.B, q *Queue, n int) []record {
	b.Helper()
	for {
		var ended int
		if err := q.tab.db.QueryRowContext(b.Context(), q.tab.q(`SELECT count(*) FROM runner_job WHERE status IN (?, ?, ?)`),
			string(jobs.Succeeded), string(jobs.Failed), string(jobs.Cancelled)).Scan(&ended); err != nil {
			b.Fatal(err)
		}
		if ended >= n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	recs, err := q.tab.list(b.Context(), jobs.Filter{Scope: jobs.Scope{Any: true}, Limit: n})
	if err != nil {
		b.Fatal(err)
	}
	return recs
}

// BenchmarkJobOverhead: one job at a time, submit to end, against the
// same turn run directly (runner.Service.Run, what /run calls) in the
// same run: what a job adds to its turn.
func BenchmarkJobOverhead(b *testing.B) {
	svc := benchService(b)
	b.Run("direct-run", func(b *testing.B) {
		var ds []time.Duration
		for i := 0; b.Loop(); i++ {
			req := sayRequest("say hello")
			req.SessionID = fmt.Sprintf("direct-%d", i)
			start := time.Now()
			if res, err := svc.Run(b.Context(), req, nil); err != nil || !res.OK {
				b.Fatalf("%v %+v", err, res)
			}
			ds = append(ds, time.Since(start))
		}
		report(b, ds)
	})
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run("job-"+backend, func(b *testing.B) {
			if backend == "postgres" && os.Getenv(storetest.PostgresURLEnv) == "" {
				b.Skip(storetest.PostgresURLEnv + " not set")
			}
			q := benchQueue(b, backend, svc)
			if err := q.Start(b.Context()); err != nil {
				b.Fatal(err)
			}
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				j, _, err := q.Submit(b.Context(), jobs.Spec{Request: sayRequest("say hello")})
				if err != nil {
					b.Fatal(err)
				}
				for {
					rec, _, _, err := q.tab.get(b.Context(), j.ID)
					if err != nil {
						b.Fatal(err)
					}
					if rec.Status.Ended() {
						if rec.Status != jobs.Succeeded {
							b.Fatalf("job %s", rec.Status)
						}
						break
					}
					time.Sleep(time.Millisecond)
				}
				ds = append(ds, time.Since(start))
			}
			report(b, ds)
		})
	}
}

func report(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(msOf(ds[len(ds)/2]), "p50-ms")
	b.ReportMetric(msOf(ds[len(ds)*99/100]), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
