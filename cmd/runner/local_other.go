//go:build !linux

package main

import (
	"errors"
	"log/slog"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// newLocal refuses: the local provider isolates with Linux's bubblewrap,
// namespaces, cgroups and nftables.
func newLocal(config.Config, *egress.Policy, *slog.Logger) (sandbox.Provider, error) {
	return nil, errors.New("it runs on Linux only: set AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=daytona here")
}

// localCommand knows no command: no local sandbox runs this binary here.
func localCommand([]string) (code int, ok bool) { return 0, false }

// overrideBinds binds nothing: no local sandbox runs here.
func overrideBinds(config.Config) ([]sandbox.Bind, error) { return nil, nil }
