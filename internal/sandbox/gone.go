package sandbox

import (
	"context"
	"errors"
)

// ErrGone marks an error that says the sandbox itself no longer exists or
// no longer runs (deleted out of band, auto-deleted, stopped under a live
// session): no retry reaches it. Errors wrapping it also carry an errdefs
// class (ErrUnavailable) and name the sandbox.
var ErrGone = errors.New("sandbox gone")

// Prober is a Sandbox that can check cheaply that it still runs and
// answers, before a warm session in it is reused. Probe returns an error
// wrapping ErrGone when the sandbox is gone.
type Prober interface {
	Probe(ctx context.Context) error
}
