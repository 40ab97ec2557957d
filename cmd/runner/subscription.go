package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"

	"github.com/agentrunner/runner/internal/config"
)

// subscriptionStatus reports, per harness, whether a personal login is
// mounted (docs/contract.md, HTTP surface). A local file check only; never a path or value.
func subscriptionStatus(cfg config.Config, environ []string) map[string]any {
	getenv := envLookup(environ)
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
	for _, name := range cfg.HarnessNames() {
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
	// Whether the harness can start at all, next to its login state.
	for name, st := range harnessStatus(cfg) {
		out[name].(map[string]any)["installed"] = st.(map[string]any)["installed"]
	}
	return out
}
