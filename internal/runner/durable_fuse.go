package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/workspace"
)

// The optional FUSE mode (Config.Mounter): the working directory is
// mounted from the session's store on the runner's host before the
// harness starts, instead of restored and checkpointed; the transcript and
// the agent folder stay synced. The turn's end waits until the mount has
// uploaded what was written; a mount that stopped working fails the turn,
// naming the store or rclone.

// fuseMarker is written into a session's store by its first mount: a
// session that fuse mode wrote is refused by sync mode (whose manifest
// would not list the files written through the mount), and one that sync
// mode wrote is refused by fuse mode (the mount would drop its symlinks,
// modes and empty directories), rather than either losing files silently.
const fuseMarker = workspace.MetaDir + "/fuse-mode"

// unmountTimeout bounds the upload of what is left and the unmount when a
// sandbox is released, which runs even when the turn was cancelled.
const unmountTimeout = 5 * time.Minute

// mountWorkdir mounts the session store at the sandbox's working
// directory and drops the "workspace" sync mount from d.
func (d *durable) mountWorkdir(ctx context.Context, t *turn, info sandbox.Info, s workspace.Stores) error {
	if info.HostWorkdir == "" {
		return errdefs.Unprocessablef("durable workspace: fuse mode mounts on the runner's host, and provider %s does not share it; set AGENTA_RUNNER_WORKSPACE_MODE=sync", info.Provider)
	}
	man, err := workspace.ReadManifest(ctx, s.Session)
	if err != nil {
		return fmt.Errorf("durable workspace: %w", err)
	}
	if len(man.Entries) > 0 {
		return errdefs.Unprocessablef("durable workspace: session %s was saved in sync mode (%s holds its manifest); fuse mode would lose its symlinks, modes and empty directories, and sync mode would not see files written through the mount. Serve it with AGENTA_RUNNER_WORKSPACE_MODE=sync", t.plan.req.SessionID, s.Session)
	}
	if err := s.Session.Put(ctx, fuseMarker, strings.NewReader("1"), 1); err != nil {
		return fmt.Errorf("durable workspace: %w", err)
	}
	start := time.Now()
	mp, err := t.svc.cfg.Mounter.Mount(ctx, s.Session, info.HostWorkdir)
	if err != nil {
		return fmt.Errorf("durable workspace: mount %s at %s: %w", s.Session, info.HostWorkdir, err)
	}
	t.log.Debug("timing", logkey.Stage, "workspace_mount", logkey.Duration, time.Since(start).Milliseconds())
	d.fuse = mp
	kept := d.mounts[:0]
	for _, m := range d.mounts {
		if m.Name != "workspace" {
			kept = append(kept, m)
		}
	}
	d.mounts = kept
	return nil
}

// refuseFuseWritten refuses, in sync mode, a session whose files fuse mode
// wrote (see fuseMarker); base is the workspace mount's restored manifest.
func refuseFuseWritten(ctx context.Context, t *turn, s workspace.Store, base workspace.Manifest) error {
	if len(base.Entries) > 0 {
		return nil
	}
	rc, err := s.Get(ctx, fuseMarker)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durable workspace: %w", err)
	}
	rc.Close()
	return errdefs.Unprocessablef("durable workspace: session %s was saved in fuse mode (%s); sync mode would start it empty. Serve it with AGENTA_RUNNER_WORKSPACE_MODE=fuse", t.plan.req.SessionID, s)
}

// mountErr is the mount's failure, if it stopped working.
func (d *durable) mountErr() error {
	if d.fuse == nil {
		return nil
	}
	if err := d.fuse.Err(); err != nil {
		return fmt.Errorf("durable workspace: fuse mount: %w", err)
	}
	return nil
}

// flushMount waits until the mount has uploaded everything written.
func (d *durable) flushMount(ctx context.Context) error {
	if d.fuse == nil {
		return nil
	}
	if err := d.fuse.Flush(ctx); err != nil {
		return fmt.Errorf("durable workspace: fuse mount: %w", err)
	}
	return nil
}

// unmount uploads what is left and unmounts, before the sandbox is
// paused or destroyed (a destroyed sandbox's directory is removed, which
// must never reach through the mount into the store).
func (d *durable) unmount(ctx context.Context, log *slog.Logger, sandboxID string) {
	if d.fuse == nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unmountTimeout)
	defer cancel()
	if err := d.fuse.Unmount(uctx); err != nil {
		log.Error("unmount the durable workspace", logkey.Sandbox, sandboxID, logkey.Error, err)
	}
}
