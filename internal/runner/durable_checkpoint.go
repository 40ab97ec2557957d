package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/workspace"
)

// checkpoints starts the turn's periodic checkpoints and returns the
// function that stops them and writes the final one, to be called with
// the turn's outcome error; it returns the error the turn ends with. A
// checkpoint that fails mid-turn cancels the turn with its cause.
func (t *turn) checkpoints(ctx context.Context, lv *live, warm bool) func(error) error {
	d := lv.durable
	if d == nil {
		return func(err error) error { return err }
	}
	if warm && t.svc.cfg.Workspaces != nil {
		// A warm turn re-resolves its stores: its own credential signs.
		if stores, ok, err := t.svc.cfg.Workspaces.Resolve(ctx, t.workspaceTarget()); err != nil {
			return func(error) error { return fmt.Errorf("durable workspace: %w", err) }
		} else if ok {
			d.mu.Lock()
			d.set(t, stores)
			d.mu.Unlock()
		}
	}
	every := t.svc.cfg.CheckpointEvery
	if every <= 0 {
		every = defaultCheckpointEvery
	}
	var (
		wg      sync.WaitGroup
		stop    = make(chan struct{})
		midErr  error
		errOnce sync.Once
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := d.checkpoint(ctx, t); err != nil {
					errOnce.Do(func() { midErr = err })
					t.log.Error("workspace checkpoint failed during the turn", logkey.Error, err)
					t.cancel(err)
					return
				}
			}
		}
	}()
	return func(err error) error {
		close(stop)
		wg.Wait()
		if midErr != nil {
			return midErr
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCheckpointTimeout)
		defer cancel()
		cerr := d.checkpoint(fctx, t)
		if cerr == nil {
			cerr = d.flushMount(fctx) // durable_fuse.go
		}
		if cerr != nil {
			t.log.Error("final workspace checkpoint failed", logkey.Error, cerr)
			if err == nil || errors.Is(err, context.Canceled) {
				return cerr
			}
			return errors.Join(err, cerr)
		}
		return err
	}
}

// checkpoint writes every mount's changes since its base.
func (d *durable) checkpoint(ctx context.Context, t *turn) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.mountErr(); err != nil {
		return err
	}
	for i, m := range d.mounts {
		if m.Name == "transcript" {
			if err := d.writeRecord(ctx, i); err != nil {
				return fmt.Errorf("durable workspace: checkpoint %s: %w", m.Name, err)
			}
		}
		man, st, err := workspace.Checkpoint(ctx, d.treeOf(i), m, d.bases[i])
		if err != nil {
			return fmt.Errorf("durable workspace: checkpoint %s: %w", m.Name, err)
		}
		d.bases[i] = man
		if d.watches[i] != nil && st.Full != "" && st.Full != filetree.FirstScan {
			t.log.Debug("workspace watch fell back to reading the whole tree", "mount", m.Name, logkey.Reason, st.Full, "dirs", st.Dirs)
		}
		if st.Wrote {
			t.log.Debug("workspace checkpoint", "mount", m.Name, "entries", st.Entries, "dirs", st.Dirs, "copied", st.Transferred, "bytes", st.Bytes, "removed", st.Deleted)
		}
	}
	return nil
}
