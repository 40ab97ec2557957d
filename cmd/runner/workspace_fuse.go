package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/rclone"
	"github.com/agentrunner/runner/internal/workspace/resign"
)

// workspaceMounter is the FUSE mounter of AGENTA_RUNNER_WORKSPACE_MODE=fuse,
// nil in sync mode. It refuses at boot what fuse mode cannot serve: a
// remote provider (the mount is on the runner's host, and the store must
// never need to be reachable from a remote sandbox), a directory store
// (nothing to mount: restoring from this disk is a local copy), and a
// host without rclone, fusermount3 or /dev/fuse.
func workspaceMounter(cfg config.Config, log *slog.Logger) (workspace.Mounter, error) {
	if cfg.Workspace.Mode != "fuse" {
		return nil, nil
	}
	const v = "AGENTA_RUNNER_WORKSPACE_MODE=fuse"
	if slices.Contains(cfg.EnabledProviders, "daytona") {
		return nil, errdefs.Invalidf("%s mounts the store on the runner's host, which a Daytona sandbox cannot see, and the store must never have to be reachable from a remote sandbox: use AGENTA_RUNNER_WORKSPACE_MODE=sync with Daytona (its restore and checkpoints go through sandboxd), or enable only the local provider", v)
	}
	raw := strings.TrimSpace(cfg.Workspace.StoreURL)
	switch {
	case strings.EqualFold(raw, "off") && !cfg.Workspace.PlatformMounts:
		return nil, errdefs.Invalidf("%s needs a store, and AGENTA_RUNNER_STORE_URL is off: set an s3:// store or AGENTA_RUNNER_PLATFORM_MOUNTS=on", v)
	case !strings.EqualFold(raw, "off") && !strings.HasPrefix(strings.ToLower(raw), "s3://"):
		where := raw
		if where == "" {
			where = "unset, the data dir"
		}
		return nil, errdefs.Invalidf("%s mounts an S3 store, and AGENTA_RUNNER_STORE_URL is a directory (%s): use sync mode, whose restore from this disk is a local copy, or an s3:// store", v, where)
	}
	rc, err := rclone.Check(rclone.Config{CacheDir: filepath.Join(cfg.DataDir, "rclone-cache"), UID: cfg.Local.UID, GID: cfg.Local.GID})
	if err != nil {
		return nil, err
	}
	rc.Log = log
	rc.Serve = func(ctx context.Context, l workspace.Leaser, prefix string) (workspace.Loopback, error) {
		return resign.Serve(ctx, resign.Config{Leases: l, Prefix: prefix, Log: log})
	}
	// A runner killed before it could unmount may have left mounts behind.
	for _, dir := range rclone.Sweep(rc, cfg.DataDir) {
		log.Warn("detached a workspace mount a previous runner left", "dir", dir)
	}
	return rclone.New(rc), nil
}
