package workspace

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Leaser hands out the lease a store signs its requests with: Lease the
// current one (re-signed when due), Renew a fresh one after the server
// refused failed (an S3 403 or expired token).
type Leaser interface {
	Lease(ctx context.Context) (Lease, error)
	Renew(ctx context.Context, failed Lease) (Lease, error)
}

// RefreshShare is the share of a lease's lifetime after which it is
// re-signed: before 80% of its TTL has passed.
const RefreshShare = 0.8

// Keeper tracks the lease in use for one store and re-signs it: before
// RefreshShare of its lifetime has passed, when it cannot outlive the
// turn's deadline, and when the server refused it. It is the installed
// lease, never a newer one that did not reach the store. Safe for
// concurrent use.
type Keeper struct {
	now func() time.Time

	// mu guards the following; signing happens under it, so concurrent
	// callers wait for one signature.
	mu       sync.Mutex
	src      CredentialSource
	cur      Lease
	signedAt time.Time
	horizon  time.Time
	recheck  bool
	signs    int
}

// NewKeeper returns a keeper signing with src; now is the clock (nil: the
// real one).
func NewKeeper(src CredentialSource, now func() time.Time) *Keeper {
	if now == nil {
		now = time.Now
	}
	return &Keeper{src: src, now: now}
}

// SetSource makes later signatures use src, such as a warm turn's own
// platform credential; the installed lease stays in use until it is due.
func (k *Keeper) SetSource(src CredentialSource) {
	k.mu.Lock()
	k.src = src
	k.mu.Unlock()
}

// SetHorizon is the turn's deadline: a lease that expires before it is
// re-signed at the next use, once (the signer may not grant more).
func (k *Keeper) SetHorizon(t time.Time) {
	k.mu.Lock()
	k.horizon, k.recheck = t, true
	k.mu.Unlock()
}

// Signs is how many leases were signed so far.
func (k *Keeper) Signs() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.signs
}

// Lease implements Leaser.
func (k *Keeper) Lease(ctx context.Context) (Lease, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.signs > 0 && !k.due() {
		return k.cur, nil
	}
	return k.sign(ctx)
}

// Renew implements Leaser: it signs again unless another caller already
// replaced failed.
func (k *Keeper) Renew(ctx context.Context, failed Lease) (Lease, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.signs > 0 && (k.cur.AccessKey != failed.AccessKey || k.cur.SessionToken != failed.SessionToken) && !k.due() {
		return k.cur, nil
	}
	return k.sign(ctx)
}

func (k *Keeper) due() bool {
	if k.cur.Permanent {
		return false
	}
	now := k.now()
	life := k.cur.ExpiresAt.Sub(k.signedAt)
	if !now.Before(k.signedAt.Add(time.Duration(float64(life) * RefreshShare))) {
		return true
	}
	if k.recheck && !k.horizon.IsZero() && k.cur.ExpiresAt.Before(k.horizon) {
		return true
	}
	return false
}

func (k *Keeper) sign(ctx context.Context) (Lease, error) {
	if k.src == nil {
		return Lease{}, fmt.Errorf("%w: no credential source", ErrStore)
	}
	at := k.now()
	l, err := k.src.Sign(ctx)
	if err != nil {
		return Lease{}, fmt.Errorf("sign store credentials: %w", err)
	}
	if err := l.Check(at); err != nil {
		return Lease{}, err
	}
	k.cur, k.signedAt, k.recheck = l, at, false
	k.signs++
	return l, nil
}

// Static is a CredentialSource that always returns the same lease, the
// keys of a configured store.
type Static Lease

// Sign implements CredentialSource.
func (s Static) Sign(context.Context) (Lease, error) { return Lease(s), nil }
