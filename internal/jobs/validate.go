package jobs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/tools"
)

// Limits bound what a spec may ask for.
type Limits struct {
	MaxAttempts int           // the most retry.maxAttempts may be
	MinInterval time.Duration // the shortest schedule interval (the tick)
	// WebhookAllowlist exempts hosts from the webhook URL's https and
	// public-address rules (AGENTA_AGENT_MCPS_HOST_ALLOWLIST, as for user
	// MCP servers).
	WebhookAllowlist []string
	// Secrets are the names a webhook's secretRef may take.
	Secrets map[string][]byte
}

// maxKey bounds an idempotency key: it is an index key.
const maxKey = 200

// Check refuses a spec the queue cannot keep, naming the field. It does
// not check the request itself: the runner's admission does that.
func Check(ctx context.Context, spec Spec, l Limits) error {
	if spec.Request == nil {
		return errdefs.Invalidf("request: required (a turn request as for /run)")
	}
	if len(spec.IdempotencyKey) > maxKey {
		return errdefs.Invalidf("idempotencyKey: %d bytes, at most %d", len(spec.IdempotencyKey), maxKey)
	}
	if sc := spec.Schedule; sc != nil {
		if _, err := sc.Next(l.MinInterval); err != nil {
			return err
		}
	}
	if p := spec.Priority; p != 0 && (p < 1 || p > 4) {
		return errdefs.Invalidf("priority: %d, want 1 (first) to 4 (last)", p)
	}
	if spec.TimeoutMs < 0 {
		return errdefs.Invalidf("timeoutMs: %d, want a positive number of milliseconds (or none)", spec.TimeoutMs)
	}
	if r := spec.Retry; r != nil && (r.MaxAttempts < 1 || r.MaxAttempts > l.MaxAttempts) {
		return errdefs.Invalidf("retry.maxAttempts: %d, want 1 to %d", r.MaxAttempts, l.MaxAttempts)
	}
	if w := spec.Webhook; w != nil {
		// The same guard as a user MCP server's URL, and the same list of
		// private hosts the operator trusts for URLs a caller names.
		if err := tools.CheckMCPServer(ctx, tools.Config{HostAllowlist: l.WebhookAllowlist}, w.URL); err != nil {
			return fmt.Errorf("webhook.url: %w", err)
		}
		if _, ok := l.Secrets[w.SecretRef]; w.SecretRef != "" && !ok {
			return errdefs.Invalidf("webhook.secretRef: %q names no secret of this runner; the operator defines it in %s (name=whsec_… pairs)", w.SecretRef, SecretsEnv)
		}
	}
	return nil
}

// SecretsEnv is the setting that names the webhook secrets.
const SecretsEnv = "AGENTA_RUNNER_JOBS_WEBHOOK_SECRETS"

// Next returns the schedule's tick function: the first tick after a time.
func (s Schedule) Next(minInterval time.Duration) (func(time.Time) time.Time, error) {
	switch s.CatchUp {
	case "", "skip", "once":
	default:
		return nil, errdefs.Invalidf("schedule.catchUp: %q is not one of skip, once", s.CatchUp)
	}
	switch {
	case s.Cron != "" && s.IntervalMs != 0:
		return nil, errdefs.Invalidf("schedule: give cron or intervalMs, not both")
	case s.IntervalMs != 0:
		if s.Timezone != "" {
			return nil, errdefs.Invalidf("schedule.timezone: only for a cron schedule")
		}
		d := time.Duration(s.IntervalMs) * time.Millisecond
		if d < minInterval {
			return nil, errdefs.Invalidf("schedule.intervalMs: %d, at least %d (the scheduler's tick, AGENTA_RUNNER_JOBS_SCHEDULE_TICK_MS)", s.IntervalMs, minInterval.Milliseconds())
		}
		return func(t time.Time) time.Time { return t.Truncate(d).Add(d) }, nil
	case s.Cron != "":
		loc := time.UTC
		if s.Timezone != "" {
			l, err := time.LoadLocation(s.Timezone)
			if err != nil {
				return nil, errdefs.Invalidf("schedule.timezone: %q is not a time zone (an IANA name such as Europe/Berlin)", s.Timezone)
			}
			loc = l
		}
		if strings.Contains(s.Cron, "TZ=") {
			return nil, errdefs.Invalidf("schedule.cron: give the time zone in schedule.timezone, not in the expression")
		}
		sched, err := cron.ParseStandard(s.Cron)
		if err != nil {
			return nil, errdefs.Invalidf("schedule.cron: %q: %v (five fields: minute hour day-of-month month day-of-week, or @hourly, @daily …)", s.Cron, err)
		}
		if sched.Next(time.Now().In(loc)).IsZero() {
			return nil, errdefs.Invalidf("schedule.cron: %q never fires (no such date in the next five years)", s.Cron)
		}
		return func(t time.Time) time.Time { return sched.Next(t.In(loc)) }, nil
	}
	return nil, errdefs.Invalidf("schedule: give cron (with timezone) or intervalMs")
}
