package river

import (
	"context"
	"errors"
	"time"

	riverqueue "github.com/riverqueue/river"

	"github.com/agentrunner/runner/internal/jobs"
)

// tickArgs is the scheduler's periodic job. River's leader alone enqueues
// it, once per Tick (unique by period), so the schedules are read by one
// replica at a time.
type tickArgs struct{}

func (tickArgs) Kind() string { return "runner_job_tick" }

type tickWorker struct {
	riverqueue.WorkerDefaults[tickArgs]
	q *Queue
}

func (w *tickWorker) Work(ctx context.Context, _ *riverqueue.Job[tickArgs]) error {
	return w.q.fireDue(ctx, w.q.cfg.Now())
}

// fireDue fires every schedule whose tick is due at now. Each schedule's
// row moves its next tick by compare-and-swap, and a run's River job is
// unique by (job, run): two replicas firing at once fire each tick once.
//
// Misfires: a tick is missed when a whole period went by since it was due
// (no replica ran). catchUp "skip" drops the missed ticks and runs at the
// next tick after now; "once" runs one run now for all of them. A tick
// that finds the previous run still going is skipped unless the schedule
// allows overlap.
func (q *Queue) fireDue(ctx context.Context, now time.Time) error {
	ids, err := q.tab.due(ctx, now)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		var run int
		rec, err := q.tab.update(ctx, id, q.cfg.Now, func(r *record) error {
			run = 0
			if r.Schedule == nil || r.NextRunAt == nil || r.NextRunAt.After(now) || r.Status == jobs.Cancelled {
				return errUnchanged // fired by another replica meanwhile
			}
			next, err := r.Schedule.Next(q.cfg.Tick)
			if err != nil {
				return err
			}
			missed := !next(*r.NextRunAt).After(now)
			busy := r.Status == jobs.Queued || r.Status == jobs.Running || r.Status == jobs.Retrying || r.Status == jobs.WaitingApproval
			at := next(now).UTC()
			r.NextRunAt = &at
			if (missed && r.Schedule.CatchUp != "once") || (busy && !r.Schedule.Overlap) {
				r.SkippedTicks++
				return nil
			}
			r.Runs++
			run = r.Runs
			r.Status = jobs.Queued
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if run > 0 {
			errs = append(errs, q.enqueue(ctx, &rec, run))
		}
	}
	return errors.Join(errs...)
}
