package workspace

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// MountSigner signs a turn's mounts with the caller's own credential, as
// the platform's sign endpoints do (POST /sessions/mounts/sign,
// /mounts/agents/sign). A platform without storage answers an error
// wrapping errdefs.ErrNotFound or ErrUnavailable.
type MountSigner interface {
	SignSession(ctx context.Context, sessionID string) (Lease, error)
	SignAgent(ctx context.Context, agentID string) (Lease, error)
}

// Signed is the Resolver of signed mounts: a request from the platform
// gets stores that sign with that request's own credential (so a warm
// turn re-signs with its caller's, never the turn that created the
// sandbox); other requests, and a platform that has no storage, use
// Fallback (the runner's configured store; nil for none).
type Signed struct {
	// Signer returns the request's signer; ok false when the request is
	// not from the platform.
	Signer func(r *wire.Request) (MountSigner, bool)
	// NewStore makes a store that signs with a Leaser (the S3 store).
	NewStore func(Leaser) Store
	Fallback Resolver
}

type signFunc func(ctx context.Context) (Lease, error)

func (f signFunc) Sign(ctx context.Context) (Lease, error) { return f(ctx) }

// Resolve implements Resolver. The session mount is signed at once: a
// platform that cannot sign one falls back, one that signs a bad lease
// fails the turn.
func (s Signed) Resolve(ctx context.Context, t Target) (Stores, bool, error) {
	fallback := func() (Stores, bool, error) {
		if s.Fallback == nil {
			return Stores{}, false, nil
		}
		return s.Fallback.Resolve(ctx, t)
	}
	if t.SessionID == "" || s.Signer == nil || t.Request == nil {
		return fallback()
	}
	signer, ok := s.Signer(t.Request)
	if !ok {
		return fallback()
	}
	sk := NewKeeper(signFunc(func(ctx context.Context) (Lease, error) { return signer.SignSession(ctx, t.SessionID) }), nil)
	if _, err := sk.Lease(ctx); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, errdefs.ErrInvalid) {
			return fallback()
		}
		return Stores{}, false, fmt.Errorf("session mount: %w", err)
	}
	out := Stores{Session: s.NewStore(sk), Keepers: []*Keeper{sk}}
	if t.AgentID != "" {
		ak := NewKeeper(signFunc(func(ctx context.Context) (Lease, error) { return signer.SignAgent(ctx, t.AgentID) }), nil)
		if _, err := ak.Lease(ctx); err != nil {
			return Stores{}, false, fmt.Errorf("agent mount: %w", err)
		}
		out.Agent = s.NewStore(ak)
		out.Keepers = append(out.Keepers, ak)
	}
	return out, true, nil
}
