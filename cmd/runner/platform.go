package main

import (
	"log/slog"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/platform/agenta"
	"github.com/agentrunner/runner/internal/runner"
)

// observers are what follows every session turn: the Agenta platform
// mirror unless AGENTA_RUNNER_PLATFORM=off.
func observers(cfg config.Config, replica string, log *slog.Logger) []runner.Observer {
	var out []runner.Observer
	if cfg.Platform.On {
		out = append(out, agenta.NewMirror(agenta.Config{
			Base: cfg.Platform.Base, ReplicaID: replica,
			HeartbeatInterval: cfg.Platform.HeartbeatInterval, RefreshInterval: cfg.Platform.RefreshInterval,
			QueueMax: cfg.Platform.QueueMax, Logger: log.With("component", "platform"),
		}))
	}
	return out
}
