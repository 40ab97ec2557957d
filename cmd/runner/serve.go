package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/agentrunner/runner/internal/api"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/metrics/prom"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// serveCommand is `runner serve`: the HTTP service, configured from the
// environment.
type serveCommand struct{ stdio }

func (c serveCommand) run(ctx context.Context, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(c.stderr, "runner serve takes no arguments; configure it with environment variables (docs/configuration.md)\n")
		return 2
	}
	cfg, ok := loadConfig(c.environ, c.stderr)
	if !ok {
		return 2
	}
	if err := cfg.RequireServe(); err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 2
	}
	log, flushLog := rateLimited(newLogger(c.stderr, cfg.LogLevel))
	defer flushLog()
	log.Info("runner config " + cfg.Summary())
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		fmt.Fprintf(c.stderr, "runner: data dir %s: %v (set AGENTA_RUNNER_DATA_DIR to a writable directory)\n", cfg.DataDir, err)
		return 1
	}
	lock, err := lockServe(cfg.DataDir)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 1
	}
	defer lock.Close()

	m := prom.New()
	eg, err := egress.New(cfg.Local.NetworkAllow)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 2
	}
	svc, closeStore, err := buildService(ctx, cfg, c.environ, log, m, eg)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 1
	}
	defer closeStore()
	m.Watch(svc)
	routes, stopMetrics, err := metricsEndpoint(ctx, cfg, m, eg, log)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 1
	}
	defer stopMetrics()
	if _, err := svc.Recover(ctx); err != nil {
		fmt.Fprintln(c.stderr, "runner: recover after restart:", err)
		return 1
	}
	queue, err := buildJobs(ctx, cfg, svc, log)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 1
	}
	var jobQueue jobs.Queue // a nil *river.Queue would be a non-nil interface
	if queue != nil {
		jobQueue = queue
	}
	// Probes the store for /ready and writes the outcomes of turns whose
	// commit failed (AGENTA_RUNNER_STORE_PROBE_INTERVAL_MS).
	watch := svc.WatchStore(cfg.Store.ProbeInterval)
	watch.Start()
	defer watch.Stop()
	// Deletes remote sandboxes no session owns (AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS).
	reaper := svc.Reaper(cfg.Daytona.ReapInterval)
	reaper.Start()
	defer reaper.Stop()
	var limited *api.ConnLimiter // set before the server serves
	installed := &harness.StatusCache{Status: func() map[string]any { return harnessStatus(cfg) }, Now: time.Now}
	h := api.New(api.Config{
		Token:             cfg.HTTP.Token,
		ProjectTokens:     cfg.HTTP.ProjectTokens,
		Version:           version,
		ConcurrencyLimit:  cfg.HTTP.ConcurrencyLimit,
		MaxBodyBytes:      cfg.HTTP.MaxBodyBytes,
		HistoryCacheBytes: cfg.Limits.HistoryCacheBytes,
		PingInterval:      cfg.HTTP.PingInterval,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		Health: func() map[string]any {
			return map[string]any{"harnesses": svc.Harnesses(), "harnessesInstalled": installed.Get(), "providers": svc.Providers(), "inFlight": svc.InFlight(), "warm": svc.Warm(), "connections": limited.Open()}
		},
		SubscriptionStatus: func() map[string]any { return subscriptionStatus(cfg, c.environ) },
		Ready:              svc.Ready,
		Jobs:               jobQueue,
		Logger:             log,
	}, svc, routes...)

	ln, err := listener(ctx, cfg, c.environ)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 1
	}
	eg.AddOwn(ln.Addr()) // a model endpoint naming the runner's API is refused
	// No server-wide ReadTimeout: it would cut a stream and a long upload;
	// a request body's stall is bounded per read (api.Config.ReadTimeout).
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: cfg.HTTP.IdleTimeout}
	limited = api.LimitConns(ln, maxConnections(cfg))
	reserve := api.ReserveServer(limited, h)
	reserved := make(chan struct{})
	go func() { _ = reserve.Serve(limited.Reserve()); close(reserved) }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limited) }()
	log.Info("runner listening", logkey.Addr, ln.Addr().String(), "version", version, "max_connections", maxConnections(cfg))

	select {
	case err := <-errc:
		log.Error("server stopped", logkey.Error, err)
		_ = reserve.Close()
		<-reserved
		return 1
	case <-ctx.Done():
	}
	drain(ctx, cfg, svc, log)
	reaper.Stop() // before the turns park their sandboxes
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.HTTP.ShutdownTimeout)
	defer cancel()
	// Stop accepting, cancel what is left of the turns (their streams end
	// with a result), park the warm sessions, then wait for handlers to
	// finish writing.
	go func() { _ = srv.Shutdown(sctx) }()
	jobsStopped := make(chan struct{})
	go func() {
		defer close(jobsStopped)
		if queue != nil {
			// Fetches no more; its attempts end as the turns below stop,
			// and run again after the restart.
			_ = queue.Stop(sctx)
		}
	}()
	if err := svc.Shutdown(sctx); err != nil {
		log.Warn("shutdown: turns still tearing down at the deadline", logkey.Error, err)
	}
	<-jobsStopped
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("shutdown", logkey.Error, err)
	}
	_ = reserve.Shutdown(sctx)
	<-reserved
	log.Info("runner stopped")
	return 0
}
