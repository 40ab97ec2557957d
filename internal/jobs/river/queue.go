package river

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	riverqueue "github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/pgcut"
	"github.com/agentrunner/runner/internal/wire"
)

// Turns is what the queue needs of the runner: *runner.Service.
type Turns interface {
	Check(ctx context.Context, req *wire.Request) error
	Start(ctx context.Context, req *wire.Request) (*runner.Turn, error)
	KillSession(ctx context.Context, k store.SessionKey) int
	GetSession(ctx context.Context, k store.SessionKey) (runner.SessionView, error)
}

var _ Turns = (*runner.Service)(nil)

// Config configures a Queue. Zero values take the defaults noted.
type Config struct {
	Replica string
	// Concurrency is how many job turns this replica runs at once (4), a
	// share of its own beside the interactive turns' limit.
	Concurrency int
	// ProjectConcurrency caps one project's running jobs on this replica
	// (by project; "*" for every other project; default Concurrency).
	ProjectConcurrency map[string]int
	// MaxAttempts is a run's default attempts (3) and MaxAttemptsLimit the
	// most a job may ask for (25).
	MaxAttempts      int
	MaxAttemptsLimit int
	// RetryBase is the first retry's delay (1 s), doubling to RetryMax (5 min).
	RetryBase time.Duration
	RetryMax  time.Duration
	// Tick is the scheduler's period (1 s) and the shortest interval.
	Tick time.Duration
	// Poll is how often a parked or busy run looks again (2 s).
	Poll time.Duration
	// ApprovalTTL is how long a parked run waits for its answer (the
	// runner's AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS; 10 min).
	ApprovalTTL time.Duration
	// RescueAfter is how long a run may stay running before another
	// replica takes it for dead (River's rescuer; 1 h).
	RescueAfter time.Duration
	// SealKey seals requests' secrets (32 bytes; none: such jobs are refused).
	SealKey []byte
	// WebhookAllowlist and WebhookSecrets: jobs.Limits.
	WebhookAllowlist []string
	WebhookSecrets   map[string][]byte
	// WebhookClient posts webhooks (default: refused ranges checked at
	// dial time, hosts in WebhookAllowlist exempt).
	WebhookClient *http.Client
	Logger        *slog.Logger
	Now           func() time.Time
	// ConnectTimeout bounds opening one PostgreSQL connection (the
	// runner's AGENTA_RUNNER_DATABASE_CONNECT_TIMEOUT_MS; 5 s) unless the
	// URL sets connect_timeout.
	ConnectTimeout time.Duration
}

func (c *Config) defaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.MaxAttemptsLimit <= 0 {
		c.MaxAttemptsLimit = 25
	}
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Minute
	}
	if c.Tick < time.Second {
		c.Tick = time.Second // River's unique-by-period floor
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.ApprovalTTL <= 0 {
		c.ApprovalTTL = 10 * time.Minute
	}
	if c.RescueAfter <= 0 {
		c.RescueAfter = time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.WebhookClient == nil {
		c.WebhookClient = webhookClient(c.WebhookAllowlist)
	}
}

// engine is the part of a River client the queue uses, whatever its
// driver's transaction type.
type engine interface {
	Insert(ctx context.Context, args riverqueue.JobArgs, opts *riverqueue.InsertOpts) (*rivertype.JobInsertResult, error)
	JobCancel(ctx context.Context, id int64) (*rivertype.JobRow, error)
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Stopped() <-chan struct{}
}

// Queue is jobs.Queue on River.
type Queue struct {
	cfg     Config
	turns   Turns
	tab     *table
	seal    *sealer
	river   engine
	limits  jobs.Limits
	log     *slog.Logger
	closeDB func() error

	// mu guards the following: the running jobs by project.
	mu      sync.Mutex
	running map[string]int
}

var _ jobs.Queue = (*Queue)(nil)

// sqliteDriver is River's SQLite driver without its emulated
// LISTEN/NOTIFY: an outbox table its listener polls every 50 ms, whatever
// the load, where an idle runner spent most of its CPU (with the fetch
// poll, 1.8 s per 30 s). The SQLite file is this replica's alone, so
// nothing another process writes needs to wake it: without a listener
// River runs poll-only, and a job inserted here wakes this process's
// fetcher directly, at once; a run whose snooze or retry delay ended is
// fetched at the next poll (FetchPollInterval).
type sqliteDriver struct{ *riversqlite.Driver }

func (sqliteDriver) SupportsListener() bool     { return false }
func (sqliteDriver) SupportsListenNotify() bool { return false }

// OpenSQLite opens (creating) the jobs database at path, runs River's
// migrations and the queue's own, and returns the queue, not yet started.
// One replica only: SQLite is this replica's own file.
func OpenSQLite(ctx context.Context, path string, cfg Config, turns Turns) (*Queue, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, fmt.Errorf("jobs database %s: %w", path, err)
	}
	// One connection: SQLite has one writer, and River's statements and
	// ours then queue in the pool instead of failing busy.
	db.SetMaxOpenConns(1)
	q, err := open(ctx, sqliteDriver{riversqlite.New(db)}, &table{db: db}, cfg, turns, true)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("jobs database %s: %w", path, err)
	}
	q.closeDB = db.Close
	return q, nil
}

// OpenPostgres opens the queue on the runner's PostgreSQL (url), shared
// by every replica.
func OpenPostgres(ctx context.Context, url string, cfg Config, turns Turns) (*Queue, error) {
	cfg.defaults()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("jobs database: %w", err)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		// A server that accepts and then says nothing holds a dial
		// forever otherwise; River redials after every error.
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	// River's broken connections would hold the pool's close up to 15 s
	// each with a stalled server (pgcut).
	cut := pgcut.New(pc.ConnConfig.DialFunc)
	pc.ConnConfig.DialFunc = cut.Dial
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("jobs database: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	closeDB := func() error { err := db.Close(); cut.Cut(); pool.Close(); return err }
	q, err := open(ctx, riverpgxv5.New(pool), &table{db: db, pg: true}, cfg, turns, false)
	if err != nil {
		_ = closeDB()
		return nil, fmt.Errorf("jobs database: %w", err)
	}
	q.closeDB = closeDB
	return q, nil
}

const (
	queueRuns    = "runner_jobs"
	queueControl = "runner_jobs_control"
)

func open[TTx any](ctx context.Context, drv riverdriver.Driver[TTx], tab *table, cfg Config, turns Turns, local bool) (*Queue, error) {
	cfg.defaults()
	seal, err := newSealer(cfg.SealKey)
	if err != nil {
		return nil, err
	}
	mig, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrations: %w", err)
	}
	if err := tab.migrate(ctx); err != nil {
		return nil, err
	}
	q := &Queue{cfg: cfg, turns: turns, tab: tab, seal: seal, log: cfg.Logger, running: map[string]int{},
		limits: jobs.Limits{MaxAttempts: cfg.MaxAttemptsLimit, MinInterval: cfg.Tick, WebhookAllowlist: cfg.WebhookAllowlist, Secrets: cfg.WebhookSecrets}}
	if local {
		// This replica's own file: a run left running was this
		// process's before it died; nobody else will finish it.
		if _, err := tab.db.ExecContext(ctx, `UPDATE river_job SET state = 'available' WHERE state = 'running'`); err != nil {
			return nil, fmt.Errorf("requeue the runs of the previous process: %w", err)
		}
	}
	workers := riverqueue.NewWorkers()
	riverqueue.AddWorker(workers, &runWorker{q: q})
	riverqueue.AddWorker(workers, &hookWorker{q: q})
	riverqueue.AddWorker(workers, &tickWorker{q: q})
	client, err := riverqueue.NewClient(drv, &riverqueue.Config{
		ID:     cfg.Replica + "-" + randomHex(4),
		Logger: slog.New(warnOnly{cfg.Logger.Handler()}).With("component", "river"),
		Queues: map[string]riverqueue.QueueConfig{
			queueRuns:    {MaxWorkers: cfg.Concurrency},
			queueControl: {MaxWorkers: 4},
		},
		Workers: workers,
		// A job inserted by this process wakes its fetcher (SQLite),
		// or LISTEN/NOTIFY does (PostgreSQL), and a freed worker fetches
		// at once after a full fetch: the poll is the fallback, for a
		// snoozed or retried run whose time came and a notification
		// lost. At 100 ms it was most of an idle runner's CPU.
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: time.Second,
		// River's rescuer takes only runs older than their timeout for
		// dead (none, with no timeout): the attempt's context ends at
		// RescueAfter, which does not stop its turn (a session's turn
		// outlives its caller; timeoutMs and the runner's limits do).
		JobTimeout:           cfg.RescueAfter,
		RescueStuckJobsAfter: cfg.RescueAfter,
		MaxAttempts:          cfg.MaxAttempts,
		// Ended runs are kept a week: GET /v1/jobs reads our own rows,
		// River's are only the execution record.
		CompletedJobRetentionPeriod: 7 * 24 * time.Hour,
		PeriodicJobs: []*riverqueue.PeriodicJob{riverqueue.NewPeriodicJob(riverqueue.PeriodicInterval(cfg.Tick),
			func() (riverqueue.JobArgs, *riverqueue.InsertOpts) {
				return tickArgs{}, &riverqueue.InsertOpts{Queue: queueControl, UniqueOpts: riverqueue.UniqueOpts{ByPeriod: cfg.Tick}}
			}, &riverqueue.PeriodicJobOpts{RunOnStart: true})},
	})
	if err != nil {
		return nil, err
	}
	q.river = client
	return q, nil
}

// Start starts the workers; Stop stops them.
func (q *Queue) Start(ctx context.Context) error { return q.river.Start(ctx) }

// Stop stops fetching and waits, bounded by ctx, for the running
// attempts (stop the runner's turns beside it: an attempt whose turn the
// runner stopped is run again later), then closes the database.
//
// The database is closed only once River has stopped: closing a pool
// waits for every connection to come back, and with a stalled PostgreSQL
// River's own services hold theirs past any shutdown timeout (its
// leader's resignation and its completer retry under deadlines of their
// own, some 40 s together). A Stop that runs out of ctx returns an error
// and leaves the database open; a later Stop may finish the job, else
// the process's exit closes it.
func (q *Queue) Stop(ctx context.Context) error {
	if err := q.river.Stop(ctx); err != nil {
		return fmt.Errorf("jobs: River did not stop in time, so its database was left open (a stalled PostgreSQL?): %w", err)
	}
	if q.closeDB == nil {
		return nil
	}
	return q.closeDB()
}

// warnOnly passes River's warnings and errors on: at info it logs its
// producers' job counts every few seconds.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(as)} }
func (w warnOnly) WithGroup(g string) slog.Handler       { return warnOnly{w.Handler.WithGroup(g)} }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// projectOf is the project a request's session is keyed by.
func projectOf(req *wire.Request) string {
	r := *req
	r.SessionID = "x"
	return runner.KeyOf(&r).ProjectID
}

// Submit implements jobs.Queue.
func (q *Queue) Submit(ctx context.Context, spec jobs.Spec) (jobs.Job, bool, error) {
	if err := jobs.Check(ctx, spec, q.limits); err != nil {
		return jobs.Job{}, false, err
	}
	req := spec.Request
	if err := q.turns.Check(ctx, req); err != nil {
		// Refused now, not at run time; 400 for the job whatever the
		// class a /run would have (unknown harness: 422 there).
		return jobs.Job{}, false, errdefs.With(errdefs.ErrInvalid, fmt.Errorf("request.%w", err))
	}
	project := projectOf(req)
	if spec.IdempotencyKey != "" {
		if prev, found, err := q.tab.byKey(ctx, project, spec.IdempotencyKey); err != nil {
			return jobs.Job{}, false, errdefs.With(errdefs.ErrUnavailable, err)
		} else if found {
			return prev.Job, false, nil
		}
	}
	now := q.cfg.Now().UTC()
	rec := &record{Job: jobs.Job{ID: "job_" + randomHex(10), ProjectID: project, Status: jobs.Queued, IdempotencyKey: spec.IdempotencyKey,
		Harness: req.Harness, Schedule: spec.Schedule, NotBefore: spec.NotBefore, Webhook: spec.Webhook, MaxAttempts: q.cfg.MaxAttempts,
		Priority: spec.Priority, TimeoutMs: spec.TimeoutMs, SessionID: req.SessionID, Attempts: []jobs.Attempt{}, Deliveries: []jobs.Delivery{},
		CreatedAt: now, UpdatedAt: now}}
	if spec.Retry != nil {
		rec.MaxAttempts = spec.Retry.MaxAttempts
	}
	if rec.Priority == 0 {
		rec.Priority = 2
	}
	bare, secrets := runner.SplitSecrets(req)
	sealed, err := q.seal.seal(rec.ID, secrets)
	if err != nil {
		return jobs.Job{}, false, err
	}
	if rec.Request, err = json.Marshal(bare); err != nil {
		return jobs.Job{}, false, err
	}
	if sc := spec.Schedule; sc != nil {
		next, _ := sc.Next(q.cfg.Tick)
		from := now
		if spec.NotBefore != nil && spec.NotBefore.After(from) {
			from = spec.NotBefore.Add(-time.Millisecond)
		}
		at := next(from).UTC()
		rec.Status, rec.NextRunAt = jobs.Scheduled, &at
	} else {
		rec.Runs = 1
	}
	stored, created, err := q.tab.insert(ctx, rec, sealed)
	if err != nil || !created || rec.Schedule != nil {
		return stored.Job, created, err
	}
	if err := q.enqueue(ctx, rec, 1); err != nil {
		return jobs.Job{}, false, err
	}
	j, err := q.Get(ctx, jobs.Scope{Any: true}, rec.ID)
	return j, true, err
}

// enqueue inserts run's River job, unique by (job, run): a second insert
// of one run (two replicas' ticks, a retried request) is a no-op.
func (q *Queue) enqueue(ctx context.Context, rec *record, run int) error {
	opts := &riverqueue.InsertOpts{Queue: queueRuns, MaxAttempts: rec.MaxAttempts, Priority: rec.Priority,
		UniqueOpts: riverqueue.UniqueOpts{ByArgs: true}}
	if rec.NotBefore != nil && rec.Schedule == nil {
		opts.ScheduledAt = *rec.NotBefore
	}
	res, err := q.river.Insert(ctx, runArgs{JobID: rec.ID, Run: run}, opts)
	if err != nil {
		_, _ = q.tab.update(context.WithoutCancel(ctx), rec.ID, q.cfg.Now, func(r *record) error {
			r.Status, r.Result = jobs.Failed, &jobs.Result{Error: "not queued: " + err.Error()}
			return nil
		})
		return fmt.Errorf("job %s: queue run %d: %w", rec.ID, run, errdefs.With(errdefs.ErrUnavailable, err))
	}
	_, err = q.tab.update(ctx, rec.ID, q.cfg.Now, func(r *record) error {
		r.RiverIDs = append(r.RiverIDs, res.Job.ID)
		return nil
	})
	return err
}

func (q *Queue) scoped(ctx context.Context, sc jobs.Scope, id string) (record, error) {
	rec, _, _, err := q.tab.get(ctx, id)
	if err == nil && !sc.Reaches(rec.ProjectID) {
		// Another project's job does not exist for this caller.
		err = errdefs.With(errdefs.ErrNotFound, fmt.Errorf("job %s: not found in project %q", id, sc.Project))
	}
	return rec, err
}

// Get implements jobs.Queue.
func (q *Queue) Get(ctx context.Context, sc jobs.Scope, id string) (jobs.Job, error) {
	rec, err := q.scoped(ctx, sc, id)
	return rec.Job, err
}

// List implements jobs.Queue.
func (q *Queue) List(ctx context.Context, f jobs.Filter) ([]jobs.Job, error) {
	recs, err := q.tab.list(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]jobs.Job, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Job)
	}
	return out, nil
}

// Cancel implements jobs.Queue.
func (q *Queue) Cancel(ctx context.Context, sc jobs.Scope, id string) (jobs.Job, error) {
	if _, err := q.scoped(ctx, sc, id); err != nil {
		return jobs.Job{}, err
	}
	var wasRunning bool
	rec, err := q.tab.update(ctx, id, q.cfg.Now, func(r *record) error {
		if r.Status.Ended() {
			return errdefs.With(errdefs.ErrConflict, fmt.Errorf("job %s already %s", id, r.Status))
		}
		wasRunning = r.Status == jobs.Running || r.Status == jobs.WaitingApproval
		r.Status, r.NextRunAt = jobs.Cancelled, nil
		return nil
	})
	if err != nil {
		return jobs.Job{}, err
	}
	for _, rid := range rec.RiverIDs {
		// The replica running it hears of this and cancels the attempt's
		// context, which kills its turn (work.go).
		if _, err := q.river.JobCancel(ctx, rid); err != nil && !errors.Is(err, riverqueue.ErrNotFound) {
			q.log.Warn("job cancel: river", logkey.Job, id, logkey.Error, err)
		}
	}
	if wasRunning && rec.SessionID != "" {
		// Running here, or parked for an approval: stop it now.
		q.turns.KillSession(ctx, store.SessionKey{ProjectID: rec.ProjectID, SessionID: rec.SessionID})
	}
	q.notify(ctx, &rec, jobs.Cancelled)
	return rec.Job, nil
}

// RunNow implements jobs.Queue.
func (q *Queue) RunNow(ctx context.Context, sc jobs.Scope, id string) (jobs.Job, error) {
	if _, err := q.scoped(ctx, sc, id); err != nil {
		return jobs.Job{}, err
	}
	var run int
	rec, err := q.tab.update(ctx, id, q.cfg.Now, func(r *record) error {
		if r.Schedule == nil {
			return errdefs.With(errdefs.ErrConflict, fmt.Errorf("job %s has no schedule; submit a new job to run it again", id))
		}
		if r.Status == jobs.Cancelled {
			return errdefs.With(errdefs.ErrConflict, fmt.Errorf("job %s is cancelled", id))
		}
		r.Runs++
		run = r.Runs
		r.Status = jobs.Queued
		return nil
	})
	if err != nil {
		return jobs.Job{}, err
	}
	if err := q.enqueue(ctx, &rec, run); err != nil {
		return jobs.Job{}, err
	}
	return q.Get(ctx, sc, id)
}
