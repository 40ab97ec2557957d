package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/agentrunner/runner/internal/api"
	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/metrics/prom"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// metricsEndpoint serves /metrics: on its own listener, unauthenticated,
// when AGENTA_RUNNER_METRICS_ADDR is set (for a scraper inside the
// cluster network), else as a route on the main port behind the token.
// It returns the routes to add to the main handler and a stop function.
func metricsEndpoint(ctx context.Context, cfg config.Config, m *prom.Metrics, eg *egress.Policy, log *slog.Logger) ([]api.Route, func(), error) {
	if cfg.HTTP.MetricsAddr == "" {
		return []api.Route{{Pattern: "GET /metrics", Handler: m.Handler()}}, func() {}, nil
	}
	ln, ok := ctx.Value(metricsListenerKey{}).(net.Listener)
	if !ok {
		var err error
		if ln, err = net.Listen("tcp", cfg.HTTP.MetricsAddr); err != nil {
			return nil, nil, fmt.Errorf("metrics listen on %s: %w (set AGENTA_RUNNER_METRICS_ADDR)", cfg.HTTP.MetricsAddr, err)
		}
	}
	eg.AddOwn(ln.Addr()) // never a destination for a sandbox
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", logkey.Error, err)
		}
	}()
	log.Info("metrics listening", logkey.Addr, ln.Addr().String())
	return nil, func() { _ = srv.Close(); <-done }, nil
}
