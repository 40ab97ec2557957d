package runner_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/acp"
	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store/sqlite"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
)

// benchService is a Service on a local provider (isolation none) and a
// SQLite store under dir, with the fake agent whose state dir is durable,
// configured further by mod; shut down when b ends. It returns the
// provider's sandboxes directory too.
func benchService(b *testing.B, dir string, mod func(*runner.Config)) (*runner.Service, string) {
	b.Helper()
	sandboxes := filepath.Join(dir, "sandboxes")
	p, err := local.New(local.Config{Dir: sandboxes, Isolation: "none"})
	if err != nil {
		b.Fatal(err)
	}
	st, err := sqlite.Open(b.Context(), filepath.Join(dir, "runner.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	cfg := runner.Config{
		Version: "bench", DefaultProvider: "local", ReplicaID: "bench",
		Harnesses: map[string]agent.Spec{"fake": {Command: agenttest.Command(), StateDirs: []string{".fakeagent"}}},
		BaseEnv:   []string{"PATH=/usr/bin:/bin"},
		Logger:    slog.New(slog.DiscardHandler),
	}
	mod(&cfg)
	svc, err := runner.New(cfg, []sandbox.Provider{p}, &acp.Driver{ClientVersion: "bench"}, st)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc, sandboxes
}

// BenchmarkColdTurnWorkspace: a cold turn in a fresh sandbox (local,
// isolation none, fake agent) with no durable store, next to the same
// turn whose session has a 1,000-file / 20 MB workspace to restore first
// (and checkpoint after).
func BenchmarkColdTurnWorkspace(b *testing.B) {
	for _, tc := range []struct {
		name  string
		files int
	}{{"no-store", 0}, {"restored-1000-files-20MB", 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			svc, sandboxes := benchService(b, dir, func(cfg *runner.Config) {
				if tc.files > 0 {
					base, err := fs.New(filepath.Join(dir, "store"))
					if err != nil {
						b.Fatal(err)
					}
					cfg.Workspaces = workspace.Configured{Base: base}
				}
			})
			run := func(msg string) {
				res, err := svc.Run(context.Background(), req{session: "s", messages: []string{msg}}.wire(), nil)
				if err != nil || !res.OK {
					b.Fatalf("turn: %v %+v", err, res)
				}
			}
			if tc.files > 0 {
				run(fmt.Sprintf("exec for d in $(seq 10); do mkdir -p d$d; for f in $(seq %d); do head -c 20480 /dev/urandom > d$d/f$f; done; done", tc.files/10))
			}
			for b.Loop() {
				b.StopTimer()
				// A fresh sandbox: nothing of the session left on this host.
				if err := os.RemoveAll(filepath.Join(sandboxes, "state")); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				run("exec ls | wc -l")
			}
		})
	}
}
