package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Platform configures the Agenta platform mirror: the calls back to the
// platform API made for every turn that carries a platform credential.
type Platform struct {
	// On is AGENTA_RUNNER_PLATFORM (on by default).
	On bool
	// Base is AGENTA_API_INTERNAL_URL, else AGENTA_API_URL; empty: each
	// request's OTLP endpoint before /otlp/, else http://api:8000.
	Base              string
	HeartbeatInterval time.Duration
	RefreshInterval   time.Duration
	QueueMax          int
}

func loadPlatform(l *loader) Platform {
	p := Platform{
		On:                l.boolean("AGENTA_RUNNER_PLATFORM", true),
		HeartbeatInterval: l.ms("AGENTA_RUNNER_PLATFORM_HEARTBEAT_MS", 30_000),
		RefreshInterval:   l.ms("AGENTA_RUNNER_PLATFORM_REFRESH_MS", 300_000),
		QueueMax:          l.lenientInt("AGENTA_RUNNER_PLATFORM_QUEUE_MAX", 10_000),
	}
	// Compose renders unset variables as empty: empty counts as unset.
	for _, k := range []string{"AGENTA_API_INTERNAL_URL", "AGENTA_API_URL"} {
		v := strings.TrimSpace(l.get(k))
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			l.fail(fmt.Sprintf("%s=%q is not an http(s) URL of the Agenta API (e.g. http://api:8000)", k, v))
			break
		}
		p.Base = strings.TrimRight(v, "/")
		break
	}
	return p
}
