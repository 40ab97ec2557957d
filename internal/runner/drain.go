package runner

import (
	"context"
	"errors"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
)

// errDraining refuses turns while the replica drains: the caller should
// retry, and a load balancer sends the retry to another replica.
var errDraining = errdefs.With(errdefs.ErrUnavailable, errors.New("runner is shutting down (draining for a restart): it takes no new turns; retry, and the turn goes to another replica"))

// Drain is the first step of a graceful stop: from now on the replica is
// not ready and refuses new turns; Drain waits, bounded by ctx, for the
// turns in flight to finish on their own. It returns ctx's error when some
// are still running at the deadline; Shutdown then cancels them and parks
// the warm sessions.
func (s *Service) Drain(ctx context.Context) error {
	for _, t := range s.stopTaking(&s.draining) {
		t.waitDone(ctx)
	}
	return ctx.Err()
}

// stopTaking sets flag (draining or closing), after which no turn
// registers, and returns the turns in flight.
func (s *Service) stopTaking(flag *bool) []*turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	*flag = true
	turns := make([]*turn, 0, len(s.inflight))
	for t := range s.inflight {
		turns = append(turns, t)
	}
	return turns
}

// Ready reports whether the replica takes new turns: nil, or why not
// (draining, or its store cannot be written: storewatch.go).
func (s *Service) Ready() error {
	s.mu.Lock()
	stopping := s.draining || s.closing
	s.mu.Unlock()
	if stopping {
		return errDraining
	}
	if err := s.health.state(); err != nil {
		return err
	}
	if rd, ok := s.providers[s.cfg.DefaultProvider].(sandbox.Readier); ok {
		if err := rd.Ready(); err != nil {
			return notReady{"sandbox_unavailable", err}
		}
	}
	return nil
}
