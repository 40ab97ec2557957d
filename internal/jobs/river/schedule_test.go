package river

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// clock is the test's time: schedules are fired at times the test names.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// openTest opens a queue on a fresh SQLite file that is never started:
// fireDue is called by hand, at the clock's times.
func openTest(t *testing.T, c *clock) *Queue {
	t.Helper()
	q, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "jobs.db"), Config{Replica: "test", Now: c.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	return q
}

// openPostgres opens a queue on url (storetest.PostgresSchema's): two
// calls on one url are two replicas.
func openPostgres(t *testing.T, c *clock, url string) *Queue {
	t.Helper()
	q, err := OpenPostgres(t.Context(), url, Config{Replica: "test", Now: c.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	return q
}

func schedule(t *testing.T, q *Queue, c *clock, sc jobs.Schedule) string {
	t.Helper()
	next, err := sc.Next(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	at := next(c.now).UTC()
	rec := &record{Job: jobs.Job{ID: "job_" + randomHex(6), ProjectID: "p", Status: jobs.Scheduled, Schedule: &sc, NextRunAt: &at,
		MaxAttempts: 1, Priority: 2, CreatedAt: c.now}, Request: []byte(`{"harness":"fake"}`)}
	if _, _, err := q.tab.insert(t.Context(), rec, ""); err != nil {
		t.Fatal(err)
	}
	return rec.ID
}

func runs(t *testing.T, q *Queue, id string) (int, int) {
	t.Helper()
	rec, _, _, err := q.tab.get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var river int
	text := "CAST(args AS TEXT)"
	if q.tab.pg {
		text = "args::text"
	}
	if err := q.tab.db.QueryRowContext(t.Context(), q.tab.q(`SELECT count(*) FROM river_job WHERE kind = ? AND `+text+` LIKE ?`), runArgs{}.Kind(), "%"+id+"%").Scan(&river); err != nil {
		t.Fatal(err)
	}
	if river != rec.Runs {
		t.Fatalf("job %s: %d runs recorded, %d River jobs", id, rec.Runs, river)
	}
	return rec.Runs, rec.SkippedTicks
}

// settle marks the job's latest run ended, as a worker would.
func settle(t *testing.T, q *Queue, id string) {
	t.Helper()
	if _, err := q.tab.update(t.Context(), id, q.cfg.Now, func(r *record) error { r.Status = jobs.Scheduled; return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestScheduleFiresOncePerTick: every due tick fires one run, however
// often and by however many replicas fireDue is called for it.
func TestScheduleFiresOncePerTick(t *testing.T) {
	for name, open := range map[string]func(*testing.T, *clock) (*Queue, *Queue){
		"sqlite": func(t *testing.T, c *clock) (*Queue, *Queue) { q := openTest(t, c); return q, q },
		"postgres": func(t *testing.T, c *clock) (*Queue, *Queue) {
			url := storetest.PostgresSchema(t)
			return openPostgres(t, c, url), openPostgres(t, c, url)
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := &clock{now: time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)}
			a, b := open(t, c)
			id := schedule(t, a, c, jobs.Schedule{IntervalMs: 60_000})
			c.now = c.now.Add(15 * time.Second) // 10:00:45: not due
			for _, q := range []*Queue{a, b} {
				if err := q.fireDue(t.Context(), c.now); err != nil {
					t.Fatal(err)
				}
			}
			if n, _ := runs(t, a, id); n != 0 {
				t.Fatalf("fired before its tick: %d runs", n)
			}
			for tick := 1; tick <= 3; tick++ {
				c.now = time.Date(2026, 3, 1, 10, tick, 0, 0, time.UTC)
				for range 2 {
					for _, q := range []*Queue{a, b} {
						if err := q.fireDue(t.Context(), c.now); err != nil {
							t.Fatal(err)
						}
					}
				}
				if n, _ := runs(t, a, id); n != tick {
					t.Fatalf("after tick %d: %d runs", tick, n)
				}
				settle(t, a, id)
			}
		})
	}
}

// TestScheduleMisfires: ticks missed while no replica ran are dropped
// (catchUp skip) or run once (catchUp once); a tick that finds the
// previous run going is skipped unless the schedule allows overlap.
func TestScheduleMisfires(t *testing.T) {
	c := &clock{now: time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)}
	q := openTest(t, c)
	skip := schedule(t, q, c, jobs.Schedule{IntervalMs: 60_000})
	once := schedule(t, q, c, jobs.Schedule{IntervalMs: 60_000, CatchUp: "once"})
	c.now = time.Date(2026, 3, 1, 10, 7, 10, 0, time.UTC) // six ticks missed
	if err := q.fireDue(t.Context(), c.now); err != nil {
		t.Fatal(err)
	}
	if n, skipped := runs(t, q, skip); n != 0 || skipped != 1 {
		t.Fatalf("skip: %d runs, %d skipped; want 0, 1", n, skipped)
	}
	if n, _ := runs(t, q, once); n != 1 {
		t.Fatalf("once: %d runs, want 1 for all the missed ticks", n)
	}
	// The next tick is 10:08, not one of the missed ones.
	c.now = time.Date(2026, 3, 1, 10, 8, 0, 0, time.UTC)
	if err := q.fireDue(t.Context(), c.now); err != nil {
		t.Fatal(err)
	}
	if n, _ := runs(t, q, skip); n != 1 {
		t.Fatalf("skip at the next tick: %d runs, want 1", n)
	}
	// once's first run never ended: its tick is skipped.
	if n, skipped := runs(t, q, once); n != 1 || skipped != 1 {
		t.Fatalf("overlap: %d runs, %d skipped; want 1, 1", n, skipped)
	}
	overlap := schedule(t, q, c, jobs.Schedule{IntervalMs: 60_000, Overlap: true})
	for m := 9; m <= 10; m++ {
		c.now = time.Date(2026, 3, 1, 10, m, 0, 0, time.UTC)
		if err := q.fireDue(t.Context(), c.now); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := runs(t, q, overlap); n != 2 {
		t.Fatalf("overlap allowed: %d runs, want 2", n)
	}
}
