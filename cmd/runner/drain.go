package main

import (
	"context"
	"log/slog"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/peer"
	"github.com/agentrunner/runner/internal/runner"
)

// drain is the first half of a graceful stop (SIGTERM): the replica
// reports not ready (/ready, /health?ready=1 answer 503) and refuses new
// turns with 503 while the server keeps listening, so a load balancer
// moves traffic away; the turns in flight get AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS
// to finish. What is still running then is cancelled by Shutdown.
//
// With replicas on one store, the registry row is marked draining first
// (beat, nil with SQLite): a replica that forwards a turn here takes the
// session over instead, and runs it cold from the shared store.
func drain(ctx context.Context, cfg config.Config, svc *runner.Service, beat *peer.Heartbeat, log *slog.Logger) {
	n := svc.InFlight()
	log.Info("shutting down: draining (not ready, no new turns)", "turns", n, "timeout_ms", cfg.HTTP.ShutdownTimeout.Milliseconds())
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.HTTP.ShutdownTimeout)
	defer cancel()
	if beat != nil {
		if err := beat.Drain(dctx); err != nil {
			log.Warn("mark this replica draining in the replica registry", logkey.Error, err)
		}
	}
	if err := svc.Drain(dctx); err != nil {
		log.Warn("shutting down: turns still running at the drain deadline are cancelled", "turns", svc.InFlight())
		return
	}
	log.Info("shutting down: every in-flight turn finished")
}
