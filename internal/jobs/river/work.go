package river

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	riverqueue "github.com/riverqueue/river"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// runArgs is one run of a job: a River job whose attempts are turns.
type runArgs struct {
	JobID string `json:"jobId" river:"unique"`
	Run   int    `json:"run" river:"unique"`
}

func (runArgs) Kind() string { return "runner_job_run" }

type runWorker struct {
	riverqueue.WorkerDefaults[runArgs]
	q *Queue
}

// NextRetry doubles from RetryBase to RetryMax.
func (w *runWorker) NextRetry(j *riverqueue.Job[runArgs]) time.Time {
	return w.q.cfg.Now().Add(backoff(w.q.cfg.RetryBase, w.q.cfg.RetryMax, j.Attempt))
}

func backoff(base, most time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

func (w *runWorker) Work(ctx context.Context, j *riverqueue.Job[runArgs]) error {
	return w.q.work(ctx, j.Args, j.Attempt >= j.MaxAttempts)
}

// Outcomes of an attempt, as Attempt.Outcome shows them.
const (
	outRunning   = "running"
	outPaused    = "paused"
	outSucceeded = "succeeded"
	outFailed    = "failed"
	outRetry     = "retry"
	outCancelled = "cancelled"
	outAdopted   = "adopted"
)

// sessionOf is the session a run's turn goes to.
func sessionOf(rec *record, run int) string {
	if rec.SessionID != "" && !strings.HasPrefix(rec.SessionID, "job_") {
		return rec.SessionID
	}
	if rec.Schedule != nil {
		return fmt.Sprintf("%s_%d", rec.ID, run)
	}
	return rec.ID
}

// work is one attempt at a run. It returns nil when the run ended (River
// completes it), JobCancel when it ended without success or was
// cancelled (never retried), JobSnooze to look again without spending an
// attempt (parked for an approval, session busy, project at its limit),
// and an error for an infrastructure fault (River retries it).
func (q *Queue) work(ctx context.Context, a runArgs, last bool) error {
	rec, sealed, _, err := q.tab.get(ctx, a.JobID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return riverqueue.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if rec.Status == jobs.Cancelled {
		return riverqueue.JobCancel(errors.New("job cancelled"))
	}
	for _, at := range rec.Attempts {
		if at.Run == a.Run && at.Outcome != outRunning && at.Outcome != outPaused && at.Outcome != outRetry {
			return nil // the run ended (a rescued copy of an attempt that finished)
		}
	}
	key := store.SessionKey{ProjectID: rec.ProjectID, SessionID: sessionOf(&rec, a.Run)}
	if done, err := q.adopt(ctx, &rec, a.Run, key); done || err != nil {
		return err
	}
	if !q.acquire(rec.ProjectID) {
		return riverqueue.JobSnooze(q.cfg.Poll)
	}
	defer q.release(rec.ProjectID)

	req, err := q.request(&rec, sealed)
	if err != nil {
		return q.finish(ctx, a, key, "", outFailed, &jobs.Result{Error: err.Error()})
	}
	n := 1
	for _, at := range rec.Attempts {
		if at.Run == a.Run {
			n++
		}
	}
	turnID := fmt.Sprintf("%s.%d.%d", rec.ID, a.Run, n)
	req.SessionID, req.TurnID = key.SessionID, turnID
	now := q.cfg.Now().UTC()
	if _, err := q.tab.update(ctx, rec.ID, q.cfg.Now, func(r *record) error {
		if r.Status == jobs.Cancelled {
			return riverqueue.JobCancel(errors.New("job cancelled"))
		}
		r.Status, r.SessionID, r.TurnID, r.InteractionID = jobs.Running, key.SessionID, turnID, ""
		r.Attempts = append(r.Attempts, jobs.Attempt{Run: a.Run, N: n, TurnID: turnID, Replica: q.cfg.Replica, StartedAt: now, Outcome: outRunning})
		return nil
	}); err != nil {
		return err
	}

	turn, err := q.turns.Start(ctx, req)
	if err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			// The session is busy: an interactive turn, or the turn of a
			// replica that died and still holds its lease. Not a fault of
			// the job: look again without spending an attempt (nor
			// keeping this one, which ran nothing).
			q.dropAttempt(ctx, rec.ID, turnID)
			return riverqueue.JobSnooze(q.cfg.Poll)
		}
		if retryable(err) && !last {
			return q.retry(ctx, rec.ID, turnID, err)
		}
		return q.finish(ctx, a, key, turnID, outFailed, &jobs.Result{Error: err.Error()})
	}

	// This replica holds the session now: an earlier attempt still
	// marked running belonged to a replica that is gone.
	q.supersede(ctx, rec.ID, a.Run, turnID)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if rec.TimeoutMs > 0 {
		var stopT context.CancelFunc
		runCtx, stopT = context.WithTimeoutCause(runCtx, time.Duration(rec.TimeoutMs)*time.Millisecond, errJobTimeout)
		defer stopT()
	}
	// A session's turn outlives its caller's context: cancelling this
	// attempt (DELETE, timeoutMs) stops it as /kill does. The River
	// client stopping for a shutdown does not: the runner's own shutdown
	// stops the turn, and the attempt is run again.
	killed := make(chan struct{})
	stopKill := context.AfterFunc(runCtx, func() {
		defer close(killed)
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer kcancel()
		if errors.Is(context.Cause(runCtx), errJobTimeout) || q.cancelled(kctx, rec.ID) {
			q.turns.KillSession(kctx, key)
		}
	})
	var mu sync.Mutex
	var ready bool
	var interaction string
	res, err := turn.Run(runCtx, func(_ int64, ev wire.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.Type == wire.EventData && ev.Name == "agent-status" && strings.Contains(string(ev.Data), "environment_ready"):
			ready = true
		case ev.Type == wire.EventInteractionReq:
			interaction = ev.ID
		}
	})
	if !stopKill() {
		<-killed // the kill started: this attempt owns it, and waits
	}
	mu.Lock()
	envReady, iid := ready, interaction
	mu.Unlock()
	result := &jobs.Result{OK: res.OK, Output: res.Output, StopReason: res.StopReason, Error: res.Error, Usage: res.Usage}
	switch {
	case q.cancelled(context.WithoutCancel(ctx), rec.ID):
		q.endAttempt(ctx, rec.ID, turnID, outCancelled, "")
		return riverqueue.JobCancel(errors.New("job cancelled"))
	case errors.Is(context.Cause(runCtx), errJobTimeout):
		result.OK, result.Error = false, fmt.Sprintf("the job ran longer than its timeoutMs (%d); its turn was cancelled", rec.TimeoutMs)
		return q.finish(ctx, a, key, turnID, outFailed, result)
	case err == nil && res.StopReason == "paused":
		return q.park(ctx, &rec, a, turnID, iid)
	case err == nil && res.OK:
		return q.finish(ctx, a, key, turnID, outSucceeded, result)
	case (runner.Interrupted(err) || !envReady) && !last:
		// No sandbox or no harness came up (nothing ran), or the runner
		// stopped the turn for its own reasons: run it again.
		return q.retry(ctx, rec.ID, turnID, err)
	}
	// The turn ran and failed on the model's or the request's side.
	return q.finish(ctx, a, key, turnID, outFailed, result)
}

var errJobTimeout = errors.New("job timeout")

// retryable is a refusal worth another attempt: the runner or a
// dependency could not serve now.
func retryable(err error) bool {
	return runner.Interrupted(err) || errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrExhausted)
}

func (q *Queue) cancelled(ctx context.Context, id string) bool {
	rec, _, _, err := q.tab.get(ctx, id)
	return err == nil && rec.Status == jobs.Cancelled
}

// request rebuilds the turn request: the stored one and its secrets.
func (q *Queue) request(rec *record, sealed string) (*wire.Request, error) {
	var req wire.Request
	if err := json.Unmarshal(rec.Request, &req); err != nil {
		return nil, fmt.Errorf("job %s: stored request: %w", rec.ID, err)
	}
	secrets, err := q.seal.open(rec.ID, sealed)
	if err != nil {
		return nil, err
	}
	runner.MergeSecrets(&req, secrets)
	return &req, nil
}

// adopt settles an earlier attempt of the run that never recorded its
// outcome (its replica died, or it parked for an approval) from the turn
// ledger: a committed turn is taken as the run's outcome and not run
// again. It reports done when the attempt must not start a new turn.
func (q *Queue) adopt(ctx context.Context, rec *record, run int, key store.SessionKey) (bool, error) {
	var prev *jobs.Attempt
	for i := range rec.Attempts {
		if at := &rec.Attempts[i]; at.Run == run && (at.Outcome == outRunning || at.Outcome == outPaused) {
			prev = at
		}
	}
	if prev == nil {
		return false, nil
	}
	view, err := q.turns.GetSession(ctx, key)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return true, err
	}
	var tv *runner.TurnView
	for i := range view.Turns {
		if view.Turns[i].TurnID == prev.TurnID {
			tv = &view.Turns[i]
		}
	}
	a := runArgs{JobID: rec.ID, Run: run}
	switch {
	case tv == nil || tv.Status == string(store.TurnInterrupted):
		q.endAttempt(ctx, rec.ID, prev.TurnID, outRetry, "the replica running it stopped before its turn was committed")
		return false, nil
	case tv.Status == string(store.TurnPaused):
		// The answer continues the turn as the session's next turn
		// (POST /v1/sessions/{id}/interactions/…): its outcome is the
		// run's, and it may park again.
		var cont *runner.TurnView
		for i := range view.Turns {
			if view.Turns[i].Index > tv.Index {
				cont = &view.Turns[i]
			}
		}
		switch {
		case cont == nil && view.Running:
			return true, riverqueue.JobSnooze(q.cfg.Poll) // the answer's turn is starting
		case cont == nil && len(view.Interactions) > 0:
			if q.cfg.Now().Sub(prev.StartedAt) > q.cfg.ApprovalTTL+q.cfg.Poll {
				return true, q.finish(ctx, a, key, prev.TurnID, outFailed, &jobs.Result{Error: "nobody answered the approval in time (AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS)"})
			}
			return true, riverqueue.JobSnooze(q.cfg.Poll)
		case cont == nil:
			return true, q.finish(ctx, a, key, prev.TurnID, outFailed, &jobs.Result{Error: "the turn paused for an approval that can no longer be answered (it expired, or the runner holding it restarted)"})
		case cont.Status == string(store.TurnRunning):
			return true, riverqueue.JobSnooze(q.cfg.Poll)
		case cont.Status == string(store.TurnPaused):
			if iid := pendingID(view); iid != "" && iid != rec.InteractionID {
				r, err := q.tab.update(ctx, rec.ID, q.cfg.Now, func(r *record) error { r.InteractionID = iid; return nil })
				if err == nil {
					q.notify(ctx, &r, jobs.WaitingApproval)
				}
			}
			return true, riverqueue.JobSnooze(q.cfg.Poll)
		}
		tv = cont
	case tv.Status == string(store.TurnRunning):
		if view.Running {
			return true, riverqueue.JobSnooze(q.cfg.Poll)
		}
		// Running on another replica, alive or gone: a new attempt's
		// Start is refused (a conflict) while that replica's lease holds,
		// and once it lapsed the turn is that replica's no more.
		return false, nil
	}
	res := &jobs.Result{OK: tv.Status == string(store.TurnCompleted), StopReason: tv.StopReason, Error: tv.Error, Usage: &tv.Usage}
	out := outAdopted
	if prev.Outcome == outPaused {
		out = map[bool]string{true: outSucceeded, false: outFailed}[res.OK]
	}
	if tv.Status == string(store.TurnCancelled) && !res.OK && res.Error == "" {
		res.Error = "the turn was cancelled"
	}
	return true, q.finish(ctx, a, key, prev.TurnID, out, res)
}

// pendingID is the session's newest pending interaction.
func pendingID(v runner.SessionView) string {
	if n := len(v.Interactions); n > 0 {
		return v.Interactions[n-1].InteractionID
	}
	return ""
}

// park records a run waiting for a person's approval and looks again
// later: the answer comes through the session's interactions route.
func (q *Queue) park(ctx context.Context, rec *record, a runArgs, turnID, iid string) error {
	r, err := q.tab.update(context.WithoutCancel(ctx), rec.ID, q.cfg.Now, func(r *record) error {
		r.Status, r.InteractionID = jobs.WaitingApproval, iid
		setAttempt(r, turnID, outPaused, "")
		return nil
	})
	if err != nil {
		return err
	}
	q.notify(ctx, &r, jobs.WaitingApproval)
	return riverqueue.JobSnooze(q.cfg.Poll)
}

func setAttempt(r *record, turnID, outcome, msg string) {
	for i := range r.Attempts {
		if at := &r.Attempts[i]; at.TurnID == turnID {
			at.Outcome, at.Error = outcome, msg
			if outcome != outRunning && outcome != outPaused {
				t := time.Now().UTC()
				at.EndedAt = &t
			}
		}
	}
}

func (q *Queue) endAttempt(ctx context.Context, id, turnID, outcome, msg string) {
	_, err := q.tab.update(context.WithoutCancel(ctx), id, q.cfg.Now, func(r *record) error {
		setAttempt(r, turnID, outcome, msg)
		if outcome == outRetry && r.Status != jobs.Cancelled {
			r.Status = jobs.Retrying
		}
		return nil
	})
	if err != nil {
		q.log.Warn("job attempt not recorded", logkey.Job, id, logkey.Turn, turnID, logkey.Error, err)
	}
}

// dropAttempt removes an attempt that ran nothing.
func (q *Queue) dropAttempt(ctx context.Context, id, turnID string) {
	_, err := q.tab.update(context.WithoutCancel(ctx), id, q.cfg.Now, func(r *record) error {
		r.Attempts = slices.DeleteFunc(r.Attempts, func(at jobs.Attempt) bool { return at.TurnID == turnID })
		return nil
	})
	if err != nil {
		q.log.Warn("job attempt not recorded", logkey.Job, id, logkey.Turn, turnID, logkey.Error, err)
	}
}

// supersede marks the run's earlier attempts still shown running as
// retried: the turn of turnID holds their session now.
func (q *Queue) supersede(ctx context.Context, id string, run int, turnID string) {
	_, err := q.tab.update(context.WithoutCancel(ctx), id, q.cfg.Now, func(r *record) error {
		changed := false
		for i := range r.Attempts {
			if at := &r.Attempts[i]; at.Run == run && at.TurnID != turnID && at.Outcome == outRunning {
				at.Outcome, at.Error = outRetry, "the replica running it stopped before its turn was committed"
				changed = true
			}
		}
		if !changed {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		q.log.Warn("job attempt not recorded", logkey.Job, id, logkey.Turn, turnID, logkey.Error, err)
	}
}

// retry records an infrastructure fault and hands it to River, which
// runs the attempt again after a backoff.
func (q *Queue) retry(ctx context.Context, id, turnID string, err error) error {
	q.endAttempt(ctx, id, turnID, outRetry, err.Error())
	return err
}

// finish records a run's outcome and notifies its webhook.
func (q *Queue) finish(ctx context.Context, a runArgs, key store.SessionKey, turnID, outcome string, res *jobs.Result) error {
	ev := jobs.Failed
	if res.OK {
		ev = jobs.Succeeded
	}
	rec, err := q.tab.update(context.WithoutCancel(ctx), a.JobID, q.cfg.Now, func(r *record) error {
		if r.Status == jobs.Cancelled {
			return errUnchanged
		}
		if turnID != "" {
			setAttempt(r, turnID, outcome, res.Error)
		}
		r.Result, r.SessionID, r.InteractionID = res, key.SessionID, ""
		if turnID != "" {
			r.TurnID = turnID
		}
		r.Status = ev
		if r.Schedule != nil {
			r.Status = jobs.Scheduled
		}
		return nil
	})
	if err != nil {
		return err
	}
	if rec.Status == jobs.Cancelled {
		return riverqueue.JobCancel(errors.New("job cancelled"))
	}
	q.notify(ctx, &rec, ev)
	if !res.OK {
		return riverqueue.JobCancel(errors.New(res.Error))
	}
	return nil
}

// acquire takes a slot of the project's share on this replica.
func (q *Queue) acquire(project string) bool {
	limit, ok := q.cfg.ProjectConcurrency[project]
	if !ok {
		limit, ok = q.cfg.ProjectConcurrency["*"]
	}
	if !ok || limit <= 0 {
		limit = q.cfg.Concurrency
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running[project] >= limit {
		return false
	}
	q.running[project]++
	return true
}

func (q *Queue) release(project string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running[project]--; q.running[project] <= 0 {
		delete(q.running, project)
	}
}
