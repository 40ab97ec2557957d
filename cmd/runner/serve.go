package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/agentrunner/runner/internal/api"
	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/jobs"
	jobsriver "github.com/agentrunner/runner/internal/jobs/river"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/metrics/prom"
	"github.com/agentrunner/runner/internal/peer"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/store"
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
	lock, err := lockServe(cfg.DataDir, cfg.Store.DatabaseURL == "")
	if err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return 1
	}
	defer lock.Close()

	s := &server{cfg: cfg, environ: c.environ, log: log}
	defer s.close()
	if code, err := s.start(ctx); err != nil {
		fmt.Fprintln(c.stderr, "runner:", err)
		return code
	}
	return s.serve(ctx, c.stderr)
}

// server is `runner serve` once configured: the service and what runs
// beside it (metrics, jobs, the store watch, the reaper), each stopped by
// close in the reverse order of start.
type server struct {
	cfg     config.Config
	environ []string
	log     *slog.Logger
	svc     *runner.Service
	st      store.Store
	eg      *egress.Policy
	// peers forwards to the replicas sharing the store, beat writes this
	// one's registry row (peers.go); both nil with SQLite.
	peers   *peer.Peers
	beat    *peer.Heartbeat
	queue   *jobsriver.Queue // nil without jobs
	routes  []api.Route
	reaper  *runner.Reaper
	closers []func()
}

// start builds the service and starts what runs beside it. The exit code
// goes with an error: 2 for a configuration the operator must fix, 1 for
// a failure at run time.
func (s *server) start(ctx context.Context) (int, error) {
	m := prom.New()
	eg, err := egress.New(s.cfg.Local.NetworkAllow)
	if err != nil {
		return 2, err
	}
	s.eg = eg
	svc, st, closeStore, err := buildService(ctx, s.cfg, s.environ, s.log, m, eg)
	if err != nil {
		return 1, err
	}
	s.svc, s.st = svc, st
	s.onClose(closeStore)
	if s.peers = newPeers(s.cfg, st, svc.ReplicaID(), s.log); s.peers != nil {
		s.onClose(s.peers.Close)
	}
	m.Watch(svc)
	routes, stopMetrics, err := metricsEndpoint(ctx, s.cfg, m, eg, s.log)
	if err != nil {
		return 1, err
	}
	s.routes = routes
	s.onClose(stopMetrics)
	if _, err := svc.Recover(ctx); err != nil {
		return 1, fmt.Errorf("recover after restart: %w", err)
	}
	svc.StartPrewarm() // after Recover, which reaps the sandboxes it finds running
	if s.queue, err = buildJobs(ctx, s.cfg, svc, s.log); err != nil {
		return 1, err
	}
	// Probes the store for /ready and writes the outcomes of turns whose
	// commit failed (AGENTA_RUNNER_STORE_PROBE_INTERVAL_MS).
	watch := svc.WatchStore(s.cfg.Store.ProbeInterval)
	watch.Start()
	s.onClose(watch.Stop)
	// Deletes remote sandboxes no session owns (AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS).
	s.reaper = svc.Reaper(s.cfg.Daytona.ReapInterval)
	s.reaper.Start()
	s.onClose(s.reaper.Stop)
	return 0, nil
}

func (s *server) onClose(f func()) { s.closers = append(s.closers, f) }

func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// handler is the HTTP API over the service; open reports the connections
// the listener holds, for /health.
func (s *server) handler(open func() int) http.Handler {
	var jobQueue jobs.Queue // a nil *river.Queue would be a non-nil interface
	if s.queue != nil {
		jobQueue = s.queue
	}
	var forward api.Forwarder // likewise a nil *peer.Peers
	if s.peers != nil {
		forward = s.peers
	}
	cfg, environ, svc := s.cfg, s.environ, s.svc
	installed := &harness.StatusCache{Status: func() map[string]any { return harnessStatus(cfg) }, Now: time.Now}
	return api.New(api.Config{
		Token:             cfg.HTTP.Token,
		ProjectTokens:     cfg.HTTP.ProjectTokens,
		Version:           version,
		ConcurrencyLimit:  cfg.HTTP.ConcurrencyLimit,
		MaxBodyBytes:      cfg.HTTP.MaxBodyBytes,
		HistoryCacheBytes: cfg.Limits.HistoryCacheBytes,
		PingInterval:      cfg.HTTP.PingInterval,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		Health: func() map[string]any {
			h := map[string]any{"harnesses": svc.Harnesses(), "harnessesInstalled": installed.Get(), "providers": svc.Providers(), "inFlight": svc.InFlight(), "warm": svc.Warm(), "connections": open()}
			if pw := svc.Prewarm(); pw != nil {
				h["prewarm"] = prewarmHealth(pw)
			}
			return h
		},
		SubscriptionStatus: func() map[string]any { return subscriptionStatus(cfg, environ) },
		Ready:              svc.Ready,
		Jobs:               jobQueue,
		Peers:              forward,
		PeerToken:          cfg.Peers.Token,
		Logger:             s.log,
	}, svc, s.routes...)
}

// serve listens until ctx ends, then drains and stops.
func (s *server) serve(ctx context.Context, stderr io.Writer) int {
	ln, err := listener(ctx, s.cfg, s.environ)
	if err != nil {
		fmt.Fprintln(stderr, "runner:", err)
		return 1
	}
	s.eg.AddOwn(ln.Addr()) // a model endpoint naming the runner's API is refused
	if s.beat, err = startHeartbeat(ctx, s.cfg, s.st, s.svc.ReplicaID(), ln, s.log); err != nil {
		_ = ln.Close()
		fmt.Fprintln(stderr, "runner:", err)
		return 1
	}
	limited := api.LimitConns(ln, maxConnections(s.cfg))
	h := s.handler(limited.Open)
	// No server-wide ReadTimeout: it would cut a stream and a long upload;
	// a request body's stall is bounded per read (api.Config.ReadTimeout).
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: s.cfg.HTTP.IdleTimeout}
	reserve := api.ReserveServer(limited, h)
	reserved := make(chan struct{})
	go func() { _ = reserve.Serve(limited.Reserve()); close(reserved) }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limited) }()
	s.log.Info("runner listening", logkey.Addr, ln.Addr().String(), "version", version, "max_connections", maxConnections(s.cfg))

	select {
	case err := <-errc:
		s.log.Error("server stopped", logkey.Error, err)
		_ = reserve.Close()
		<-reserved
		return 1
	case <-ctx.Done():
	}
	s.shutdown(ctx, srv, reserve)
	<-reserved
	s.log.Info("runner stopped")
	return 0
}

// shutdown drains the turns, then stops accepting, cancels what is left
// of the turns (their streams end with a result), parks the warm sessions,
// and waits for handlers (srv's and the reserve's) to finish writing, all
// within AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS of the drain's end.
func (s *server) shutdown(ctx context.Context, srv, reserve *http.Server) {
	drain(ctx, s.cfg, s.svc, s.beat, s.log)
	s.reaper.Stop() // before the turns park their sandboxes
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.HTTP.ShutdownTimeout)
	defer cancel()
	go func() { _ = srv.Shutdown(sctx) }()
	jobsStopped := make(chan struct{})
	go func() {
		defer close(jobsStopped)
		if s.queue != nil {
			// Fetches no more; its attempts end as the turns below stop,
			// and run again after the restart.
			if err := s.queue.Stop(sctx); err != nil {
				s.log.Warn("shutdown", logkey.Error, err)
			}
		}
	}()
	if err := s.svc.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown: turns still tearing down at the deadline", logkey.Error, err)
	}
	<-jobsStopped
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("shutdown", logkey.Error, err)
	}
	_ = reserve.Shutdown(sctx)
	if s.beat != nil {
		// Gone from the registry: the others take its sessions at once.
		if err := s.beat.Stop(sctx); err != nil {
			s.log.Warn("remove this replica's row from the replica registry", logkey.Error, err)
		}
	}
}
