package river

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	riverqueue "github.com/riverqueue/river"

	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// hookArgs is one webhook to post: a River job, retried with backoff.
type hookArgs struct {
	JobID string          `json:"jobId"`
	ID    string          `json:"id"` // webhook-id: the same on every retry
	Event jobs.Status     `json:"event"`
	Body  json.RawMessage `json:"body"`
}

func (hookArgs) Kind() string { return "runner_job_webhook" }

// hookAttempts bounds a webhook's deliveries.
const hookAttempts = 8

type hookWorker struct {
	riverqueue.WorkerDefaults[hookArgs]
	q *Queue
}

func (w *hookWorker) NextRetry(j *riverqueue.Job[hookArgs]) time.Time {
	return w.q.cfg.Now().Add(backoff(w.q.cfg.RetryBase, w.q.cfg.RetryMax, j.Attempt))
}

func (w *hookWorker) Timeout(*riverqueue.Job[hookArgs]) time.Duration { return 30 * time.Second }

// notify queues the webhook of a job's event, if it has one.
func (q *Queue) notify(ctx context.Context, rec *record, ev jobs.Status) {
	if rec.Webhook == nil {
		return
	}
	body, err := json.Marshal(jobs.Event{Type: "job." + string(ev), JobID: rec.ID, ProjectID: rec.ProjectID, Status: ev,
		SessionID: rec.SessionID, TurnID: rec.TurnID, InteractionID: rec.InteractionID, Result: rec.Result, At: q.cfg.Now().UTC()})
	if err != nil {
		return
	}
	id := fmt.Sprintf("msg_%s_%d_%s", rec.ID, rec.Runs, ev)
	if ev == jobs.WaitingApproval {
		id += "_" + rec.InteractionID
	}
	_, err = q.river.Insert(context.WithoutCancel(ctx), hookArgs{JobID: rec.ID, ID: id, Event: ev, Body: body},
		&riverqueue.InsertOpts{Queue: queueControl, MaxAttempts: hookAttempts})
	if err != nil {
		q.log.Warn("job webhook not queued", logkey.Job, rec.ID, logkey.Event, string(ev), logkey.Error, err)
	}
}

// Work posts the webhook once and records the delivery on the job.
func (w *hookWorker) Work(ctx context.Context, j *riverqueue.Job[hookArgs]) error {
	q := w.q
	rec, _, _, err := q.tab.get(ctx, j.Args.JobID)
	if err != nil || rec.Webhook == nil {
		return riverqueue.JobCancel(fmt.Errorf("webhook of job %s: %v", j.Args.JobID, err))
	}
	status, err := q.post(ctx, rec.Webhook, j.Args.ID, j.Args.Body)
	d := jobs.Delivery{ID: j.Args.ID, Event: j.Args.Event, Attempt: j.Attempt, At: q.cfg.Now().UTC(), Status: status, OK: err == nil}
	if err != nil {
		d.Error = err.Error()
	}
	if _, uerr := q.tab.update(ctx, rec.ID, q.cfg.Now, func(r *record) error {
		r.Deliveries = append(r.Deliveries, d)
		if len(r.Deliveries) > 100 {
			r.Deliveries = r.Deliveries[len(r.Deliveries)-100:]
		}
		return nil
	}); uerr != nil {
		q.log.Warn("job webhook delivery not recorded", logkey.Job, rec.ID, logkey.Error, uerr)
	}
	return err
}

// post sends one signed delivery; a 2xx answer is delivered.
func (q *Queue) post(ctx context.Context, wh *jobs.Webhook, id string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wh.URL, bytes.NewReader(body))
	if err != nil {
		return 0, errors.New("webhook.url: not a valid URL")
	}
	ts := q.cfg.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentrunner-jobs")
	req.Header.Set(jobs.HeaderID, id)
	req.Header.Set(jobs.HeaderTimestamp, strconv.FormatInt(ts, 10))
	if secret, ok := q.cfg.WebhookSecrets[wh.SecretRef]; ok && wh.SecretRef != "" {
		req.Header.Set(jobs.HeaderSignature, jobs.Sign(secret, id, ts, body))
	}
	resp, err := q.cfg.WebhookClient.Do(req)
	if err != nil {
		// The URL is not echoed: its query may carry a credential.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

// webhookClient dials only public addresses, checked at dial time (after
// resolution, so a name that resolves or rebinds to the host's loopback,
// a private network or the metadata endpoint is refused), except for the
// hosts the operator allowlisted; it follows no redirect, which would
// escape both checks.
func webhookClient(allow []string) *http.Client {
	allowed := map[string]bool{}
	for _, h := range allow {
		allowed[strings.ToLower(strings.TrimSpace(h))] = true
	}
	guarded := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || egress.Reserved(ap.Addr()) {
			return fmt.Errorf("dial %s: %w: a webhook may not reach the host's loopback, a private or link-local network or the metadata endpoint; allowlist the host in AGENTA_AGENT_MCPS_HOST_ALLOWLIST", address, egress.ErrRefused)
		}
		return nil
	}}
	plain := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			if allowed[strings.ToLower(strings.Trim(host, "[]"))] {
				return plain.DialContext(ctx, network, addr)
			}
			return guarded.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 15 * time.Second,
		MaxIdleConnsPerHost:   2,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
