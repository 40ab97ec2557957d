package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
)

// Recover runs once at start-up, before the first turn: turns this replica
// was running when it died are marked interrupted, and sandboxes it left
// are reaped. It returns how many turns it marked.
func (s *Service) Recover(ctx context.Context) (int, error) {
	n, err := s.store.InterruptTurns(ctx, s.cfg.ReplicaID, time.Now())
	if err != nil {
		return 0, fmt.Errorf("mark interrupted turns: %w", err)
	}
	if n > 0 {
		s.log.Warn("turns interrupted by the previous stop of this replica", "turns", n)
	}
	for name, p := range s.providers {
		recs, err := s.store.ListSandboxes(ctx, store.SandboxQuery{Provider: name})
		if err != nil {
			return n, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, rec := range recs {
			if rec.State == store.SandboxDestroyed {
				continue
			}
			s.reap(ctx, p, rec)
		}
	}
	return n, nil
}

// reap deals with a sandbox an earlier process left. A remote sandbox
// outlives the runner: it is kept for its session's next turn (which
// reopens it) unless that session is gone. A local one lost its harness
// with the process that started it; what is left is its directory.
func (s *Service) reap(ctx context.Context, p sandbox.Provider, rec store.Sandbox) {
	log := s.log.With(logkey.Sandbox, rec.ID, logkey.Provider, rec.Provider)
	if r, ok := p.(sandbox.Remover); ok {
		sess, err := s.store.GetSession(ctx, rec.SessionKey())
		if err == nil && sess.Status == store.SessionActive && sess.SandboxID == rec.ID {
			if rec.State == store.SandboxRunning {
				rec.State = store.SandboxPaused // reopenable; its harness must restart
				_, _ = s.store.PutSandbox(ctx, rec)
			}
			log.Info("kept the session's sandbox for its next turn")
			return
		}
		if err := r.Remove(ctx, rec.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			log.Warn("reap orphaned sandbox", logkey.Error, err)
			return
		}
	} else if o, ok := p.(sandbox.Opener); ok {
		sb, err := o.Open(ctx, rec.ID, sandbox.Spec{SessionID: rec.SessionID})
		switch {
		case err == nil:
			if err := sb.Destroy(ctx); err != nil {
				log.Warn("reap orphaned sandbox", logkey.Error, err)
				return
			}
		case !errors.Is(err, errdefs.ErrNotFound):
			log.Warn("reap orphaned sandbox", logkey.Error, err)
			return
		}
	}
	rec.State = store.SandboxDestroyed
	if _, err := s.store.PutSandbox(ctx, rec); err != nil {
		log.Warn("record reaped sandbox", logkey.Error, err)
		return
	}
	log.Info("reaped orphaned sandbox")
}
