package runner

import (
	"context"
	"errors"
	"sync"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/store"
)

var (
	errKilled   = errors.New("turn killed by /kill")
	errShutdown = errors.New("runner is shutting down")
	errDeleted  = errors.New("session deleted")
)

// stoppedFromOutside reports a cause that stopped a turn from outside it:
// /kill, the shutdown, the session's deletion, its takeover by another
// replica.
func stoppedFromOutside(err error) bool {
	return errors.Is(err, errKilled) || errors.Is(err, errShutdown) || errors.Is(err, errDeleted) || errors.Is(err, errdefs.ErrFenced)
}

// Kill cancels the session's in-flight turn in the project, releases its
// warm harness and waits (bounded by ctx) for the teardown. It returns how
// many turns it stopped.
//
// A turn whose request named no project (Agenta's services never send
// one on a run) matches by session id, unless the platform told us its
// project and that is another one.
func (s *Service) Kill(ctx context.Context, sessionID, projectID string) int {
	key := store.SessionKey{ProjectID: projectID, SessionID: sessionID}
	bare := store.SessionKey{SessionID: sessionID}
	n := s.stopTurns(ctx, errKilled, func(t *turn) bool {
		if t.key == key {
			return true
		}
		return t.key == bare && (t.project == "" || t.project == projectID)
	})
	s.evict(key, pool.ReasonKill)
	s.evict(bare, pool.ReasonKill)
	return n
}

// KillSession cancels the in-flight turn of exactly session k (no turn
// that named no project), releases its warm harness and waits, as Kill.
func (s *Service) KillSession(ctx context.Context, k store.SessionKey) int {
	n := s.stopSession(ctx, k, errKilled)
	s.evict(k, pool.ReasonKill)
	return n
}

func (s *Service) stopSession(ctx context.Context, key store.SessionKey, cause error) int {
	return s.stopTurns(ctx, cause, func(t *turn) bool { return t.key == key })
}

// stopTurns cancels the in-flight turns match selects (called under
// s.mu) and waits for them, bounded by ctx.
func (s *Service) stopTurns(ctx context.Context, cause error, match func(*turn) bool) int {
	s.mu.Lock()
	var hit []*turn
	for t := range s.inflight {
		if match(t) {
			hit = append(hit, t)
		}
	}
	s.mu.Unlock()
	for _, t := range hit {
		t.cancel(cause)
	}
	for _, t := range hit {
		t.waitDone(ctx)
	}
	return len(hit)
}

// Shutdown refuses new turns, cancels in-flight ones (waiting for them
// until ctx ends), then releases the warm sessions and waits for their
// teardowns, each bounded by the teardown timeout.
func (s *Service) Shutdown(ctx context.Context) error {
	turns := s.stopTaking(&s.closing)
	for _, t := range turns {
		t.cancel(errShutdown)
	}
	for _, t := range turns {
		t.waitDone(ctx)
	}
	if s.prewarm != nil {
		s.prewarm.close() // bounded by the teardown timeout, as the pools
	}
	// The warm sessions' teardowns write to the store: the caller closes
	// it once Shutdown returns, so they are waited for even past ctx (each
	// is bounded by the teardown timeout), the pools side by side.
	var wg sync.WaitGroup
	for _, p := range s.pools {
		wg.Go(p.Close)
	}
	wg.Wait()
	s.closeObservers(ctx)
	return ctx.Err()
}
