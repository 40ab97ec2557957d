package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
)

// overrideBinds are the host paths that AGENTA_RUNNER_HARNESS_<NAME>
// overrides name, bound read-only into isolated local sandboxes (the
// local provider's policy: local.CommandBinds); refused at boot when a
// bind would expose what sandboxes must not see. The harness dir is bound
// already (harnessBinds).
func overrideBinds(cfg config.Config) ([]sandbox.Bind, error) {
	if cfg.Local.Isolation != "bwrap" || !slices.Contains(cfg.EnabledProviders, "local") {
		return nil, nil // no isolation: the harness sees the host as it is
	}
	var cmds []local.Command
	for _, name := range cfg.HarnessOverrides() {
		cmds = append(cmds, local.Command{Setting: "AGENTA_RUNNER_HARNESS_" + strings.ToUpper(name), Argv: cfg.Harnesses[name].Command})
	}
	binds, err := local.CommandBinds(cmds, cfg.HarnessDir, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("harness override cannot run in an isolated sandbox (AGENTA_RUNNER_LOCAL_ISOLATION=bwrap):\n%w", err)
	}
	return binds, nil
}
