package main

import (
	"log/slog"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/platform/agenta"
	"github.com/agentrunner/runner/internal/platform/traces"
)

// observers are what follows every turn: the trace exporter (for
// requests with telemetry) and the Agenta platform mirror unless
// AGENTA_RUNNER_PLATFORM=off.
func observers(cfg config.Config, replica string, log *slog.Logger, obs metrics.Observer) []platform.Observer {
	out := []platform.Observer{traces.New(traces.Config{Logger: log.With("component", "traces")})}
	if cfg.Platform.On {
		pm, _ := obs.(metrics.Platform) // nil counts nothing
		out = append(out, agenta.NewMirror(agenta.Config{
			Base: cfg.Platform.Base, ReplicaID: replica,
			HeartbeatInterval: cfg.Platform.HeartbeatInterval, RefreshInterval: cfg.Platform.RefreshInterval,
			QueueMax: cfg.Platform.QueueMax, Metrics: pm, Logger: log.With("component", "platform"),
		}))
	}
	return out
}
