package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/acp"
	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/sqlite"
)

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch level {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	case "silent":
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// buildService wires the implementations the configuration names. The
// returned close function releases the store.
func buildService(ctx context.Context, cfg config.Config, environ []string, log *slog.Logger) (*runner.Service, func(), error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("data dir %s: %w (set AGENTA_RUNNER_DATA_DIR to a writable directory)", cfg.DataDir, err)
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	replica, err := replicaID(cfg)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	svc, err := newService(cfg, environ, log, st, replica)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return svc, func() { st.Close() }, nil
}

func openStore(ctx context.Context, cfg config.Config) (store.Store, error) {
	if cfg.DatabaseURL != "" {
		st, err := postgres.Open(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL (AGENTA_RUNNER_DATABASE_URL): %w", err)
		}
		return st, nil
	}
	path := filepath.Join(cfg.DataDir, "runner.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open SQLite store %s: %w", path, err)
	}
	return st, nil
}

// replicaID is AGENTA_RUNNER_REPLICA_ID, or an id kept in the data dir so
// that a restarted runner recognises the turns it was running.
func replicaID(cfg config.Config) (string, error) {
	if cfg.ReplicaID != "" {
		return cfg.ReplicaID, nil
	}
	path := filepath.Join(cfg.DataDir, "replica-id")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "runner-" + hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write replica id: %w", err)
	}
	return id, nil
}

func newService(cfg config.Config, environ []string, log *slog.Logger, st store.Store, replica string) (*runner.Service, error) {
	var providers []sandbox.Provider
	for _, name := range cfg.EnabledProviders {
		switch name {
		case "local":
			p, err := local.New(local.Config{
				Dir:       filepath.Join(cfg.DataDir, "sandboxes"),
				Isolation: cfg.LocalIsolation,
				Logger:    log,
			})
			if err != nil {
				return nil, fmt.Errorf("local sandbox provider: %w", err)
			}
			providers = append(providers, p)
		case "daytona":
			return nil, fmt.Errorf("the daytona provider is not available in this build yet; remove it from AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS")
		}
	}
	specs := map[string]agent.Spec{}
	for name, h := range cfg.Harnesses {
		specs[name] = agent.Builtin(name, h.Command)
	}
	return runner.New(runner.Config{
		Version:         version,
		DefaultProvider: cfg.DefaultProvider,
		Harnesses:       specs,
		BaseEnv:         baseEnv(cfg, environ),
		HistoryMaxChars: cfg.HistoryMaxChars,
		ReplicaID:       replica,
		KeepAlive:       cfg.KeepAlive,
		PoolMax:         cfg.PoolMax,
		SessionTTL:      cfg.SessionTTL,
		ApprovalTTL:     cfg.ApprovalTTL,
		Logger:          log,
	}, providers, &acp.Driver{ClientVersion: version}, st)
}

// baseEnv is what every harness inherits: where to find programs, and the
// locale. Nothing else of the runner's environment (its token, cloud keys)
// reaches a harness.
func baseEnv(cfg config.Config, environ []string) []string {
	path := "/usr/local/bin:/usr/bin:/bin"
	lang := "C.UTF-8"
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			path = v
		}
		if v, ok := strings.CutPrefix(kv, "LANG="); ok && v != "" {
			lang = v
		}
	}
	return []string{"PATH=" + path, "LANG=" + lang}
}
