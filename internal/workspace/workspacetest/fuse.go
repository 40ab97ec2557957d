package workspacetest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/rclone"
	"github.com/agentrunner/runner/internal/workspace/resign"
)

// FUSE returns the configuration of rclone mounts through the loopback
// re-signing endpoint, as cmd/runner wires them, with their cache in a
// temp dir. Without rclone, fusermount3 or /dev/fuse it skips the test,
// unless CI is set: then it fails. failAfter shortens how long a failing
// store is tolerated (zero: resign.FailAfter).
func FUSE(t testing.TB, failAfter time.Duration) rclone.Config {
	t.Helper()
	cfg, err := rclone.Check(rclone.Config{CacheDir: t.TempDir()})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("fuse mode cannot be tested on this host: %v", err)
		}
		t.Skipf("fuse mode cannot be tested on this host: %v", err)
	}
	cfg.Serve = FUSEServe(failAfter)
	return cfg
}

// FUSEServe starts the loopback re-signing endpoint of one mount.
func FUSEServe(failAfter time.Duration) func(ctx context.Context, l workspace.Leaser, prefix string) (workspace.Loopback, error) {
	return func(ctx context.Context, l workspace.Leaser, prefix string) (workspace.Loopback, error) {
		return resign.Serve(ctx, resign.Config{Leases: l, Prefix: prefix, FailAfter: failAfter})
	}
}
