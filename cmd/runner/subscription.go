package main

import (
	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/harness"
)

// subscriptionStatus is /health's login state of each configured harness,
// with whether it can start at all.
func subscriptionStatus(cfg config.Config, environ []string) map[string]any {
	out := harness.Subscriptions(cfg.HarnessNames(), envLookup(environ))
	for name, st := range harnessStatus(cfg) {
		out[name].(map[string]any)["installed"] = st.(map[string]any)["installed"]
	}
	return out
}

// harnessStatus is /health's launch table: whether each harness can start.
func harnessStatus(cfg config.Config) map[string]any {
	return harness.Status(cfg.HarnessDir, cfg.HarnessNames(), func(name string) bool { return cfg.Harnesses[name].Custom })
}
