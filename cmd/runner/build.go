package main

import (
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

// buildService wires the implementations the configuration names.
func buildService(cfg config.Config, environ []string, log *slog.Logger) (*runner.Service, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w (set AGENTA_RUNNER_DATA_DIR to a writable directory)", cfg.DataDir, err)
	}
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
		Logger:          log,
	}, providers, &acp.Driver{ClientVersion: version})
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
