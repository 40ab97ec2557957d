package runnertest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/acp"
	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlite"
)

// Fake is the harness spec of the scripted fake agent (agenttest); the
// test binary's TestMain must call agenttest.MaybeRun.
func Fake() agent.Spec { return agent.Spec{Command: agenttest.Command()} }

// Logger writes warnings and worse to the test's output.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// SQLite is a fresh SQLite store in the test's temp dir, closed at
// cleanup.
func SQLite(tb testing.TB) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "runner.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// Service is runner.New(cfg, providers, the ACP driver, st), shut down
// at cleanup.
func Service(tb testing.TB, cfg runner.Config, providers []sandbox.Provider, st store.Store) *runner.Service {
	tb.Helper()
	svc, err := runner.New(cfg, providers, &acp.Driver{ClientVersion: "test", CancelGrace: 2 * time.Second}, st)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	return svc
}
