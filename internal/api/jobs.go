package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/wire"
)

// jobRoutes registers /v1/jobs; without a queue they answer 503 naming
// the setting that turned jobs off.
func (h *Handler) jobRoutes() {
	if h.cfg.Jobs == nil {
		h.cfg.Jobs = jobsOff{}
	}
	h.mux.Handle("POST /v1/jobs", h.authProject(http.HandlerFunc(h.submitJob)))
	h.mux.Handle("GET /v1/jobs", h.authProject(http.HandlerFunc(h.listJobs)))
	h.mux.Handle("GET /v1/jobs/{id}", h.authProject(http.HandlerFunc(h.getJob)))
	h.mux.Handle("DELETE /v1/jobs/{id}", h.authProject(http.HandlerFunc(h.cancelJob)))
	h.mux.Handle("POST /v1/jobs/{id}/run", h.authProject(http.HandlerFunc(h.runJob)))
}

// jobBody is POST /v1/jobs: jobs.Spec with the request as /run decodes it.
type jobBody struct {
	Request        json.RawMessage `json:"request"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Schedule       *jobs.Schedule  `json:"schedule"`
	NotBefore      *time.Time      `json:"notBefore"`
	Webhook        *jobs.Webhook   `json:"webhook"`
	Retry          *jobs.Retry     `json:"retry"`
	Priority       int             `json:"priority"`
	TimeoutMs      int64           `json:"timeoutMs"`
}

func (h *Handler) submitJob(w http.ResponseWriter, r *http.Request) {
	body, err := readAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes), r.ContentLength, h.cfg.MaxBodyBytes)
	if err != nil {
		WriteErr(w, bodyError(err))
		return
	}
	var b jobBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		WriteErr(w, errdefs.Invalidf("Invalid JSON: %v", err))
		return
	}
	if len(b.Request) == 0 || string(b.Request) == "null" {
		WriteErr(w, errdefs.Invalidf("request: required (a turn request as for /run)"))
		return
	}
	req, err := wire.Decode(b.Request)
	if err != nil {
		WriteErr(w, errdefs.With(errdefs.ErrInvalid, prefixed("request: ", err)))
		return
	}
	if err := callerOf(r).scopeRequest(req); err != nil {
		WriteErr(w, err)
		return
	}
	job, created, err := h.cfg.Jobs.Submit(r.Context(), jobs.Spec{Request: req, IdempotencyKey: b.IdempotencyKey, Schedule: b.Schedule,
		NotBefore: b.NotBefore, Webhook: b.Webhook, Retry: b.Retry, Priority: b.Priority, TimeoutMs: b.TimeoutMs})
	if err != nil {
		WriteErr(w, err)
		return
	}
	status := http.StatusOK // the idempotency key's job
	if created {
		status = http.StatusCreated
	}
	WriteJSON(w, status, job)
}

type prefixError struct {
	prefix string
	err    error
}

func (p prefixError) Error() string { return p.prefix + p.err.Error() }
func (p prefixError) Unwrap() error { return p.err }

func prefixed(prefix string, err error) error { return prefixError{prefix, err} }

// jobScope is whose jobs a /v1/jobs request reaches.
func jobScope(r *http.Request) (jobs.Scope, error) {
	project, named, err := projectScope(r)
	return jobs.Scope{Project: project, Any: !named}, err
}

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) {
	sc, err := jobScope(r)
	if err != nil {
		WriteErr(w, err)
		return
	}
	q := r.URL.Query()
	f := jobs.Filter{Scope: sc, Status: jobs.Status(q.Get("status")), Limit: 100}
	switch s := jobs.Status(q.Get("status")); s {
	case "", jobs.Queued, jobs.Scheduled, jobs.Running, jobs.Retrying, jobs.WaitingApproval, jobs.Succeeded, jobs.Failed, jobs.Cancelled:
	default:
		WriteErr(w, errdefs.Invalidf("status: %q is not one of queued, scheduled, running, retrying, waiting_approval, succeeded, failed, cancelled", s))
		return
	}
	switch v := q.Get("schedule"); v {
	case "":
	case "yes", "true", "1":
		f.Scheduled = "yes"
	case "no", "false", "0":
		f.Scheduled = "no"
	default:
		WriteErr(w, errdefs.Invalidf("schedule: %q, want yes (only schedules) or no (only one-shot jobs)", v))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			WriteErr(w, errdefs.Invalidf("limit: %q, want 1 to 1000", v))
			return
		}
		f.Limit = n
	}
	list, err := h.cfg.Jobs.List(r.Context(), f)
	if err != nil {
		WriteErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"jobs": list})
}

// jobCall runs one of the job routes that name a job.
func (h *Handler) jobCall(w http.ResponseWriter, r *http.Request, fn func(jobs.Scope, string) (jobs.Job, error)) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 16<<10))
	sc, err := jobScope(r)
	if err != nil {
		WriteErr(w, err)
		return
	}
	job, err := fn(sc, r.PathValue("id"))
	if err != nil {
		WriteErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, job)
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	h.jobCall(w, r, func(sc jobs.Scope, id string) (jobs.Job, error) { return h.cfg.Jobs.Get(r.Context(), sc, id) })
}

func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	h.jobCall(w, r, func(sc jobs.Scope, id string) (jobs.Job, error) { return h.cfg.Jobs.Cancel(r.Context(), sc, id) })
}

func (h *Handler) runJob(w http.ResponseWriter, r *http.Request) {
	h.jobCall(w, r, func(sc jobs.Scope, id string) (jobs.Job, error) { return h.cfg.Jobs.RunNow(r.Context(), sc, id) })
}

// jobsOff is the queue of a runner without jobs (AGENTA_RUNNER_JOBS=off).
type jobsOff struct{}

var _ jobs.Queue = jobsOff{}

var errJobsOff = errdefs.With(errdefs.ErrUnavailable, errors.New("background jobs are off on this runner (AGENTA_RUNNER_JOBS=off)"))

func (jobsOff) Submit(context.Context, jobs.Spec) (jobs.Job, bool, error) {
	return jobs.Job{}, false, errJobsOff
}
func (jobsOff) Get(context.Context, jobs.Scope, string) (jobs.Job, error) {
	return jobs.Job{}, errJobsOff
}
func (jobsOff) List(context.Context, jobs.Filter) ([]jobs.Job, error) { return nil, errJobsOff }
func (jobsOff) Cancel(context.Context, jobs.Scope, string) (jobs.Job, error) {
	return jobs.Job{}, errJobsOff
}
func (jobsOff) RunNow(context.Context, jobs.Scope, string) (jobs.Job, error) {
	return jobs.Job{}, errJobsOff
}
