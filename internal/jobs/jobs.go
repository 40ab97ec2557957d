package jobs

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentrunner/runner/internal/wire"
)

// Queue is the jobs API. Every method is scoped: a Scope naming a project
// reaches only that project's jobs, and a job of another project is
// ErrNotFound, never ErrForbidden, so ids are not probed across projects.
type Queue interface {
	// Submit validates spec and queues it in its request's project, or
	// returns the job that spec's IdempotencyKey already names there
	// (created false); an invalid spec is ErrInvalid naming the field,
	// and nothing is queued.
	Submit(ctx context.Context, spec Spec) (job Job, created bool, err error)
	// Get returns one job with its attempts and deliveries.
	Get(ctx context.Context, sc Scope, id string) (Job, error)
	// List returns the jobs f matches, newest first.
	List(ctx context.Context, f Filter) ([]Job, error)
	// Cancel stops the job: a queued or scheduled one never runs again, a
	// running one has its turn cancelled as /kill does. Cancelling an
	// ended job is ErrConflict.
	Cancel(ctx context.Context, sc Scope, id string) (Job, error)
	// RunNow fires a scheduled job's next run at once (ErrConflict for a
	// job without a schedule).
	RunNow(ctx context.Context, sc Scope, id string) (Job, error)
}

// Scope is whose jobs a call reaches: one project, or with Any every
// project (the operator naming none).
type Scope struct {
	Project string
	Any     bool
}

// Reaches reports whether the scope covers a job of project.
func (s Scope) Reaches(project string) bool { return s.Any || s.Project == project }

// Filter selects jobs for List.
type Filter struct {
	Scope
	Status Status
	// Scheduled: "" every job, "yes" only schedules, "no" only one-shot jobs.
	Scheduled string
	Limit     int
}

// Spec is what POST /v1/jobs carries.
type Spec struct {
	// Request is the turn, as for /run; without a sessionId the job's turn
	// opens a session of its own (job_<id>, one per run for a schedule).
	Request        *wire.Request `json:"request"`
	IdempotencyKey string        `json:"idempotencyKey,omitempty"`
	Schedule       *Schedule     `json:"schedule,omitempty"`
	NotBefore      *time.Time    `json:"notBefore,omitempty"`
	Webhook        *Webhook      `json:"webhook,omitempty"`
	Retry          *Retry        `json:"retry,omitempty"`
	// Priority orders queued jobs: 1 runs first, 4 last (default 2).
	Priority  int   `json:"priority,omitempty"`
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// Schedule is a cron expression in a time zone, or a fixed interval.
type Schedule struct {
	Cron       string `json:"cron,omitempty"`
	Timezone   string `json:"timezone,omitempty"`
	IntervalMs int64  `json:"intervalMs,omitempty"`
	// CatchUp is what a tick missed while no replica ran does: "skip"
	// (default) drops it, "once" runs one run for all that were missed.
	CatchUp string `json:"catchUp,omitempty"`
	// Overlap lets a tick start a run while the previous one is still
	// going; by default such a tick is skipped.
	Overlap bool `json:"overlap,omitempty"`
}

// Webhook is where a job's ends are posted. SecretRef names the signing
// secret among the operator's (AGENTA_RUNNER_JOBS_WEBHOOK_SECRETS); the
// secret itself is never sent, stored or shown.
type Webhook struct {
	URL       string `json:"url"`
	SecretRef string `json:"secretRef,omitempty"`
}

// Retry bounds the attempts of one run.
type Retry struct {
	MaxAttempts int `json:"maxAttempts"`
}

// Status is a job's state.
type Status string

const (
	Queued          Status = "queued"
	Scheduled       Status = "scheduled" // a schedule waiting for its next tick
	Running         Status = "running"
	Retrying        Status = "retrying" // an infrastructure fault; another attempt is due
	WaitingApproval Status = "waiting_approval"
	Succeeded       Status = "succeeded"
	Failed          Status = "failed"
	Cancelled       Status = "cancelled"
)

// Ended reports a status no attempt changes any more.
func (s Status) Ended() bool { return s == Succeeded || s == Failed || s == Cancelled }

// Job is a job as the API shows it.
type Job struct {
	ID             string     `json:"jobId"`
	ProjectID      string     `json:"projectId"`
	Status         Status     `json:"status"`
	IdempotencyKey string     `json:"idempotencyKey,omitempty"`
	Harness        string     `json:"harness,omitempty"`
	Schedule       *Schedule  `json:"schedule,omitempty"`
	NextRunAt      *time.Time `json:"nextRunAt,omitempty"`
	NotBefore      *time.Time `json:"notBefore,omitempty"`
	Webhook        *Webhook   `json:"webhook,omitempty"`
	MaxAttempts    int        `json:"maxAttempts"`
	Priority       int        `json:"priority"`
	TimeoutMs      int64      `json:"timeoutMs,omitempty"`
	// Runs is how many runs were fired (1 for a one-shot job once queued);
	// SkippedTicks the schedule's ticks dropped (missed, or overlapping).
	Runs         int `json:"runs"`
	SkippedTicks int `json:"skippedTicks,omitempty"`
	// The latest run's session, turn and outcome.
	SessionID     string     `json:"sessionId,omitempty"`
	TurnID        string     `json:"turnId,omitempty"`
	InteractionID string     `json:"interactionId,omitempty"`
	Result        *Result    `json:"result,omitempty"`
	Attempts      []Attempt  `json:"attempts"`
	Deliveries    []Delivery `json:"deliveries"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
}

// Result is the outcome of a run's turn.
type Result struct {
	OK         bool        `json:"ok"`
	Output     string      `json:"output,omitempty"`
	StopReason string      `json:"stopReason,omitempty"`
	Error      string      `json:"error,omitempty"`
	Usage      *wire.Usage `json:"usage,omitempty"`
}

// Attempt is one try at a run's turn.
type Attempt struct {
	Run       int        `json:"run"`
	N         int        `json:"attempt"`
	TurnID    string     `json:"turnId"`
	Replica   string     `json:"replica,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// Outcome: running, paused, succeeded, failed, retry (an
	// infrastructure fault: another attempt follows), cancelled, or
	// adopted (a later attempt found this one's turn committed).
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// Delivery is one attempt at posting a webhook.
type Delivery struct {
	ID      string    `json:"id"`
	Event   Status    `json:"event"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Status  int       `json:"status,omitempty"`
	Error   string    `json:"error,omitempty"`
	OK      bool      `json:"ok"`
}

// Event is the body of a webhook.
type Event struct {
	Type          string          `json:"type"` // job.succeeded, job.failed, …
	JobID         string          `json:"jobId"`
	ProjectID     string          `json:"projectId"`
	Status        Status          `json:"status"`
	SessionID     string          `json:"sessionId,omitempty"`
	TurnID        string          `json:"turnId,omitempty"`
	InteractionID string          `json:"interactionId,omitempty"`
	Result        *Result         `json:"result,omitempty"`
	At            time.Time       `json:"at"`
	Extra         json.RawMessage `json:"extra,omitempty"`
}
