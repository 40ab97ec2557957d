package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// The example of the Standard Webhooks specification's reference
// libraries: a receiver written to the specification verifies us.
func TestSignStandardWebhooksVector(t *testing.T) {
	secret := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	body := []byte(`{"test": 2432232314}`)
	got := Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !Verify(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, "v1,bm9ldmVu "+got) {
		t.Fatal("Verify refused the right signature among several")
	}
	if Verify(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265331, body, got) {
		t.Fatal("Verify accepted a signature of another timestamp")
	}
}

func TestScheduleNext(t *testing.T) {
	at := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	next, err := Schedule{Cron: "0 3 * * *", Timezone: "Europe/Berlin"}.Next(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 03:00 in Berlin in winter is 02:00 UTC, the next day.
	if got, want := next(at).UTC(), time.Date(2026, 1, 11, 2, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("cron next = %s, want %s", got, want)
	}
	every, err := Schedule{IntervalMs: 60_000}.Next(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := every(at.Add(30*time.Second)), at.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("interval next = %s, want %s", got, want)
	}
}

func TestCheckNamesTheField(t *testing.T) {
	req := &wire.Request{Harness: "fake"}
	l := Limits{MaxAttempts: 10, MinInterval: time.Second, Secrets: map[string][]byte{"ok": []byte("x")}}
	for _, tc := range []struct {
		spec  Spec
		field string
	}{
		{Spec{}, "request"},
		{Spec{Request: req, Schedule: &Schedule{Cron: "* * *"}}, "schedule.cron"},
		{Spec{Request: req, Schedule: &Schedule{Cron: "@daily", IntervalMs: 5000}}, "schedule"},
		{Spec{Request: req, Schedule: &Schedule{IntervalMs: 10}}, "schedule.intervalMs"},
		{Spec{Request: req, Schedule: &Schedule{Cron: "@daily", CatchUp: "all"}}, "schedule.catchUp"},
		{Spec{Request: req, Schedule: &Schedule{Cron: "CRON_TZ=UTC @daily"}}, "schedule.cron"},
		{Spec{Request: req, Priority: 9}, "priority"},
		{Spec{Request: req, TimeoutMs: -1}, "timeoutMs"},
		{Spec{Request: req, Retry: &Retry{MaxAttempts: 11}}, "retry.maxAttempts"},
		{Spec{Request: req, IdempotencyKey: strings.Repeat("k", 201)}, "idempotencyKey"},
		{Spec{Request: req, Webhook: &Webhook{URL: "https://[::ffff:127.0.0.1]/x"}}, "webhook.url"},
		{Spec{Request: req, Webhook: &Webhook{URL: "https://10.1.2.3/x"}}, "webhook.url"},
		{Spec{Request: req, Webhook: &Webhook{URL: "https://localhost/x"}}, "webhook.url"},
		{Spec{Request: req, Webhook: &Webhook{URL: "https://8.8.8.8/x", SecretRef: "other"}}, "webhook.secretRef"},
	} {
		err := Check(context.Background(), tc.spec, l)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want ErrInvalid starting with %q", tc.spec, err, tc.field)
		}
	}
	ok := Spec{Request: req, Schedule: &Schedule{Cron: "*/5 * * * *", Timezone: "America/New_York", CatchUp: "once"},
		Webhook: &Webhook{URL: "https://8.8.8.8/x", SecretRef: "ok"}, Retry: &Retry{MaxAttempts: 10}, Priority: 4}
	if err := Check(context.Background(), ok, l); err != nil {
		t.Fatalf("a valid spec was refused: %v", err)
	}
	allowed := Limits{WebhookAllowlist: []string{"127.0.0.1"}}
	if err := Check(context.Background(), Spec{Request: req, Webhook: &Webhook{URL: "http://127.0.0.1:9/x"}}, allowed); err != nil {
		t.Fatalf("an allowlisted host was refused: %v", err)
	}
}

// FuzzSchedule: any schedule a caller sends is refused or ticks forward.
func FuzzSchedule(f *testing.F) {
	f.Add("0 3 * * *", "Europe/Berlin", int64(0), "skip")
	f.Add("", "", int64(60_000), "once")
	f.Add("0 0 30 2 *", "", int64(0), "")
	f.Add("@every 1s", "UTC", int64(0), "")
	f.Fuzz(func(t *testing.T, expr, tz string, interval int64, catchUp string) {
		next, err := Schedule{Cron: expr, Timezone: tz, IntervalMs: interval, CatchUp: catchUp}.Next(time.Second)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error not classed invalid: %v", err)
			}
			return
		}
		at := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
		if n := next(at); !n.After(at) {
			t.Fatalf("%q/%q/%d: next(%s) = %s, not after it", expr, tz, interval, at, n)
		}
	})
}
