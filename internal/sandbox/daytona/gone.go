package daytona

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

// gone is the daemon client's Gone check for sandbox id: the API says
// whether the sandbox still exists and runs. A sandbox deleted out of band
// (auto-delete, an operator, Daytona itself) or stopped under a live
// session is gone for every process in it; an API that does not answer
// proves nothing, so it is not "gone".
func (p *Provider) gone(id string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sb, err := p.api.get(ctx, id)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			return goneErr(id, "was deleted")
		case err != nil:
			return nil
		}
		switch sb.State {
		case "started", "starting", "creating", "restoring", "pending_build", "building_snapshot", "pulling_snapshot":
			return nil
		}
		return goneErr(id, "is "+sb.State)
	}
}

func goneErr(id, what string) error {
	return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("daytona sandbox %s %s: %w", id, what, sandbox.ErrGone))
}

// Probe checks that the sandbox runs and its daemon answers, within ctx:
// the runner asks before it reuses a warm session that sat idle.
func (s *Sandbox) Probe(ctx context.Context) error {
	if s.destroyed() {
		return goneErr(s.id, "was destroyed")
	}
	if _, err := s.Daemon.Health(ctx); err != nil {
		if gerr := s.p.gone(s.id)(ctx); gerr != nil {
			return gerr
		}
		return fmt.Errorf("daytona sandbox %s: %w", s.id, err)
	}
	return nil
}

// conflictRetries bounds the deletes of a sandbox that Daytona refuses
// with 409 "state change in progress".
const conflictRetries = 4

// remove deletes sandbox id: gone already (404) is done, and a sandbox in
// the middle of a state change (409) is waited for and deleted again, a
// bounded number of times; one still busy after that is left to the
// reaper, at info level, since nothing failed.
func (p *Provider) remove(ctx context.Context, id string) error {
	for attempt := 1; ; attempt++ {
		err := p.api.remove(ctx, id)
		switch {
		case err == nil, errors.Is(err, errdefs.ErrNotFound):
			return nil
		case !errors.Is(err, errdefs.ErrConflict):
			return err
		case attempt == conflictRetries:
			p.log.Info("sandbox still changing state; the reaper deletes it later", logkey.Sandbox, id, logkey.Error, err)
			return nil
		}
		// Wait for the transition to end; one that ends in destroyed is done.
		if _, serr := p.settle(ctx, id); errors.Is(serr, errdefs.ErrNotFound) {
			return nil
		} else if ctx.Err() != nil {
			return err
		}
	}
}
