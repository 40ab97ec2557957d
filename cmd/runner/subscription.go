package main

import (
	"maps"
	"slices"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/harness"
)

// subscriptionStatus is /health's login state of each configured harness,
// with whether it can start at all.
func subscriptionStatus(cfg config.Config, environ []string) map[string]any {
	out := harness.Subscriptions(slices.Sorted(maps.Keys(launchTable(cfg))), envLookup(environ))
	for name, st := range harnessStatus(cfg) {
		out[name].(map[string]any)["installed"] = st.(map[string]any)["installed"]
	}
	return out
}

// harnessStatus is /health's launch table: whether each harness can start.
func harnessStatus(cfg config.Config) map[string]any {
	overridden := func(name string) bool { _, ok := cfg.Harnesses[name]; return ok }
	return harness.Status(cfg.HarnessDir, slices.Sorted(maps.Keys(launchTable(cfg))), overridden)
}

// launchTable is each harness's launch command: the built-ins', replaced
// or joined by the operator's (AGENTA_RUNNER_HARNESS_<NAME>).
func launchTable(cfg config.Config) map[string][]string {
	overrides := map[string][]string{}
	for name, h := range cfg.Harnesses {
		overrides[name] = h.Command
	}
	return harness.Commands(overrides)
}
