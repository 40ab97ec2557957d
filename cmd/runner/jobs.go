package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/jobs/river"
	"github.com/agentrunner/runner/internal/runner"
)

// buildJobs opens the job queue on the runner's database (its own SQLite
// file in the data dir, or the runner's PostgreSQL) and starts it; nil
// when AGENTA_RUNNER_JOBS=off.
func buildJobs(ctx context.Context, cfg config.Config, svc *runner.Service, log *slog.Logger) (*river.Queue, error) {
	if !cfg.Jobs.Enabled {
		return nil, nil
	}
	replica, err := replicaID(cfg)
	if err != nil {
		return nil, err
	}
	secrets := map[string][]byte{}
	for name, s := range cfg.Jobs.WebhookSecrets {
		secrets[name] = jobs.ParseSecret(s)
	}
	jc := river.Config{Replica: replica, Concurrency: cfg.Jobs.Concurrency, ProjectConcurrency: cfg.Jobs.ProjectConcurrency,
		MaxAttempts: cfg.Jobs.MaxAttempts, RetryBase: cfg.Jobs.RetryBase, Tick: cfg.Jobs.Tick, Poll: cfg.Jobs.Poll,
		ApprovalTTL: cfg.Sessions.ApprovalTTL, RescueAfter: cfg.Jobs.RescueAfter, SealKey: cfg.Jobs.SealKey, WebhookAllowlist: cfg.Tools.MCPHostAllowlist,
		WebhookSecrets: secrets, Logger: log.With("component", "jobs"), ConnectTimeout: cfg.Store.ConnectTimeout}
	var q *river.Queue
	if cfg.Store.DatabaseURL != "" {
		q, err = river.OpenPostgres(ctx, cfg.Store.DatabaseURL, jc, svc)
	} else {
		if jc.SealKey == nil {
			if jc.SealKey, err = localSealKey(cfg.DataDir); err != nil {
				return nil, err
			}
		}
		q, err = river.OpenSQLite(ctx, filepath.Join(cfg.DataDir, "jobs.db"), jc, svc)
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: %w (AGENTA_RUNNER_JOBS=off runs without them)", err)
	}
	if err := q.Start(ctx); err != nil {
		_ = q.Stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("jobs: start: %w", err)
	}
	return q, nil
}

// localSealKey is the embedded default's key, kept in the data dir beside
// (not in) the jobs database: a copy of the database alone opens nothing.
func localSealKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, "jobs.key")
	if b, err := os.ReadFile(path); err == nil {
		k, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(k) != 32 {
			return nil, fmt.Errorf("jobs: %s is not 64 hex digits; remove it (jobs holding credentials then fail) or set AGENTA_RUNNER_JOBS_SEAL_KEY", path)
		}
		return k, nil
	}
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	if err := os.WriteFile(path, []byte(hex.EncodeToString(k)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("jobs: write %s: %w", path, err)
	}
	return k, nil
}
