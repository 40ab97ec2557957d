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

// loadPlatformBase reads the Agenta API's base URL: the first of its
// names set to an http(s) URL.
func loadPlatformBase(l *loader, s *Setting, c *Config) {
	for _, k := range s.names() {
		// Compose renders unset variables as empty: empty counts as unset.
		v := strings.TrimSpace(l.get(k))
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			l.fail(fmt.Sprintf("%s=%q is not an http(s) URL of the Agenta API (e.g. http://api:8000)", k, v))
			return
		}
		c.Platform.Base = strings.TrimRight(v, "/")
		return
	}
}
