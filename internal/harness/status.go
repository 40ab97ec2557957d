package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Status is what /health reports on the launch table: for each of names
// whether it can start (installed in dir at its pinned versions, or a
// custom command: custom(name), or a name outside the catalogue), and its
// version.
func Status(dir string, names []string, custom func(name string) bool) map[string]any {
	installed := map[string]Installed{}
	for _, in := range List(dir) {
		installed[in.Name] = in
	}
	out := map[string]any{}
	for _, name := range names {
		in, builtin := installed[name]
		switch {
		case custom(name) || !builtin:
			out[name] = map[string]any{"installed": true, "source": "custom"}
		case in.Installed:
			out[name] = map[string]any{"installed": true, "source": "harness_dir", "version": in.Packages[0].Version}
		default:
			out[name] = map[string]any{"installed": false, "source": "harness_dir", "install": "runner harness install " + name}
		}
	}
	return out
}

// StatusCache keeps a Status for a second: /health is polled (load
// balancers, probes, platforms before each turn), and reading every
// harness's package.json each time was most of its cost. An install by
// another process shows within the second.
type StatusCache struct {
	Status func() map[string]any // Status
	Now    func() time.Time

	mu sync.Mutex
	at time.Time
	v  map[string]any // never modified once cached
}

// Get returns the cached status, read again when it is a second old.
func (c *StatusCache) Get() map[string]any {
	now := c.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.v == nil || now.Sub(c.at) >= time.Second || now.Before(c.at) {
		c.v, c.at = c.Status(), now
	}
	return c.v
}

// Subscriptions reports, for each of names, whether a personal login is
// mounted (docs/contract.md, HTTP surface), read from the login dirs
// getenv names (CLAUDE_CONFIG_DIR, CODEX_HOME, PI_CODING_AGENT_DIR). A
// local file check only; never a path or value.
func Subscriptions(names []string, getenv func(string) string) map[string]any {
	probe := func(dirVar, file, provider string) map[string]any {
		dir := getenv(dirVar)
		if dir == "" {
			return map[string]any{"state": "not_configured"}
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if os.IsNotExist(err) {
			return map[string]any{"state": "login_missing", "provider": provider}
		}
		var obj map[string]any
		if err != nil || json.Unmarshal(b, &obj) != nil || len(obj) == 0 {
			return map[string]any{"state": "login_unusable", "provider": provider}
		}
		return map[string]any{"state": "ready", "provider": provider}
	}
	pi := func() map[string]any {
		st := probe("PI_CODING_AGENT_DIR", "auth.json", "")
		delete(st, "provider")
		if st["state"] != "ready" {
			return st
		}
		b, _ := os.ReadFile(filepath.Join(getenv("PI_CODING_AGENT_DIR"), "auth.json"))
		var obj map[string]any
		_ = json.Unmarshal(b, &obj)
		set := map[string]bool{}
		for k := range obj {
			switch k {
			case "anthropic":
				set["anthropic"] = true
			case "openai-codex":
				set["openai"] = true
			}
		}
		var ps []string
		for p := range set {
			ps = append(ps, p)
		}
		sort.Strings(ps)
		st["providers"] = ps
		return st
	}
	out := map[string]any{}
	for _, name := range names {
		switch name {
		case "codex":
			out[name] = probe("CODEX_HOME", "auth.json", "openai")
		case "claude":
			out[name] = probe("CLAUDE_CONFIG_DIR", ".credentials.json", "anthropic")
		case "pi_core", "pi_agenta":
			out[name] = pi()
		default:
			out[name] = map[string]any{"state": "unsupported"}
		}
	}
	return out
}
