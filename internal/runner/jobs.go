package runner

import (
	"context"
	"errors"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// Check admits req as Start would, without claiming its session or
// creating anything: a queue refuses a request it could never run when it
// is submitted, not when it runs.
func (s *Service) Check(ctx context.Context, req *wire.Request) error {
	_, err := s.admit(ctx, req)
	return err
}

// SplitSecrets returns req without the fields that carry secrets, and
// those fields alone (nil when there are none), for a caller that keeps a
// request durably and must not write its secrets in the clear.
func SplitSecrets(req *wire.Request) (wire.Request, *wire.Request) { return splitSecrets(req) }

// MergeSecrets puts what SplitSecrets took out of a request back into
// bare; nil secrets leave it as it is.
func MergeSecrets(bare *wire.Request, secrets *wire.Request) { mergeSecrets(bare, secrets) }

// Interrupted reports a turn that the runner stopped or could not serve
// for its own reasons (shutting down, draining, its store unavailable):
// nothing the request or the model did, so worth running again.
func Interrupted(err error) bool {
	return errors.Is(err, errShutdown) || errors.Is(err, errdefs.ErrUnavailable)
}
