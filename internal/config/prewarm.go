package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Prewarm configures the pre-warmed slots kept for new sessions.
type Prewarm struct {
	Shapes   []PrewarmShape
	MemoryMB int
	SlotMB   int
}

// PrewarmShape is one AGENTA_RUNNER_PREWARM entry: Slots ready slots of
// Harness on Provider (empty: the default provider).
type PrewarmShape struct {
	Harness  string
	Provider string
	Slots    int
}

// loadPrewarm parses `harness:n` and `harness@provider:n` entries; the
// names are checked against the launch table and providers when the
// service starts.
func loadPrewarm(l *loader, s *Setting, c *Config) {
	raw := strings.TrimSpace(l.get(s.Name))
	if raw == "" || raw == "off" {
		return
	}
	seen := map[string]bool{}
	for i, e := range strings.Split(raw, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, count, ok := strings.Cut(e, ":")
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if !ok || err != nil || n < 1 || n > 64 {
			l.fail(fmt.Sprintf("%s: entry %d (%q) is not harness:n or harness@provider:n with n from 1 to 64", s.Name, i+1, e))
			continue
		}
		h, p, _ := strings.Cut(strings.TrimSpace(name), "@")
		if h == "" || seen[name] {
			l.fail(fmt.Sprintf("%s: entry %d (%q) names no harness, or one named before", s.Name, i+1, e))
			continue
		}
		seen[name] = true
		c.Prewarm.Shapes = append(c.Prewarm.Shapes, PrewarmShape{Harness: h, Provider: p, Slots: n})
	}
}
