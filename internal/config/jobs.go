package config

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Jobs configures background and scheduled jobs (/v1/jobs).
type Jobs struct {
	Enabled bool
	// Concurrency is the job turns one replica runs at once: their own
	// share, beside AGENTA_RUNNER_CONCURRENCY_LIMIT's interactive turns.
	Concurrency int
	// ProjectConcurrency caps one project's (by project, "*" the rest).
	ProjectConcurrency map[string]int
	MaxAttempts        int
	RetryBase          time.Duration
	Tick               time.Duration
	Poll               time.Duration
	RescueAfter        time.Duration
	// SealKey encrypts the secrets of a job's request in its row.
	SealKey []byte
	// WebhookSecrets are the signing secrets a webhook's secretRef names.
	WebhookSecrets map[string]string
}

func loadJobsTick(l *loader, s *Setting, c *Config) {
	c.Jobs.Tick = l.ms(s.Name, int64(l.defaultInt(s)))
	if c.Jobs.Tick < time.Second {
		l.fail(s.Name + ": at least 1000 (River's unique-by-period floor)")
	}
}

func loadJobsProjects(l *loader, s *Setting, c *Config) {
	c.Jobs.ProjectConcurrency = pairs(l, s.Name, "project=n", func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 1
	})
}

func loadJobsSecrets(l *loader, s *Setting, c *Config) {
	c.Jobs.WebhookSecrets = pairs(l, s.Name, "name=secret", func(v string) (string, bool) { return v, len(v) >= 16 })
}

func loadJobsSealKey(l *loader, s *Setting, c *Config) {
	k := strings.TrimSpace(l.get(s.Name))
	if k == "" {
		return
	}
	b, err := hex.DecodeString(k)
	if err != nil || len(b) != 32 {
		l.fail(s.Name + ": want 64 hex digits (32 bytes); generate one with `openssl rand -hex 32`")
	}
	c.Jobs.SealKey = b
}

// pairs parses "key=value" entries separated by commas; errors never
// quote a value (it may be a secret).
func pairs[V any](l *loader, env, shape string, parse func(string) (V, bool)) map[string]V {
	raw := l.get(env)
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	out := map[string]V{}
	for i, e := range strings.Split(raw, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		k, v, ok := strings.Cut(e, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		val, good := parse(v)
		switch {
		case !ok || k == "":
			l.fail(fmt.Sprintf("%s: entry %d is not %s", env, i+1, shape))
		case !good:
			l.fail(fmt.Sprintf("%s: the value of %q is not valid (want %s: a count of at least 1, or a secret of at least 16 characters)", env, k, shape))
		case hasKey(out, k):
			l.fail(fmt.Sprintf("%s: %q is listed twice", env, k))
		default:
			out[k] = val
		}
	}
	return out
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }
