package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
)

// storeHealth is what the service knows of its store's writability: the
// last failed write (a turn's commit, a probe) stands until a probe
// succeeds. Turns only report failures, so a healthy turn pays nothing
// for it; the StoreWatch probes.
type storeHealth struct {
	wake    chan struct{} // buffered: a failure asks for a probe now
	watched atomic.Bool   // a StoreWatch runs: readiness follows the store

	// mu guards the following.
	mu      sync.Mutex
	err     error                  // why the store cannot be written; nil when it can
	pending map[turnRef]store.Turn // outcomes whose commit failed, to write again
}

type turnRef struct {
	session store.SessionKey
	index   int
}

// notReady is a readiness error with the status word the api reports
// (its ReadyStatus): "store_unwritable", "sandbox_unavailable".
type notReady struct {
	status string
	err    error
}

func (e notReady) Error() string       { return e.err.Error() }
func (e notReady) Unwrap() error       { return e.err }
func (e notReady) ReadyStatus() string { return e.status }

// errStoreUnwritable is the readiness error while the store cannot be
// written.
func errStoreUnwritable(err error) error { return notReady{"store_unwritable", err} }

// failed records err, a failed write; the first failure while healthy
// asks for a probe now (the watch backs off from there).
func (h *storeHealth) failed(err error) {
	h.mu.Lock()
	was := h.err
	h.err = errStoreUnwritable(err)
	h.mu.Unlock()
	if was != nil {
		return
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *storeHealth) state() error {
	if !h.watched.Load() {
		return nil // nothing would ever clear it
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// storeName names the store in errors: its String (the SQLite file, the
// PostgreSQL server), else "the store".
func (s *Service) storeName() string {
	if n, ok := s.store.(fmt.Stringer); ok {
		return n.String()
	}
	return "the store"
}

// refused reports a store error that is an answer (no such thing, a lost
// race), not a failure to write.
func refused(err error) bool {
	return errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrInvalid) || errors.Is(err, errdefs.ErrFenced)
}

// storeFailed turns err, a store write of a turn that failed, into the
// turn's error: unavailable, naming the store. The store is not ready
// until a probe succeeds. A refusal is returned as it is.
func (s *Service) storeFailed(what string, err error) error {
	if err == nil || refused(err) || errors.Is(err, context.Canceled) {
		return err // an answer, or the caller gone: not the store's fault
	}
	err = errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("%s %s: %w", s.storeName(), what, err))
	s.health.failed(err)
	return err
}

// retryOutcome records that the turn rec (its begin committed, or not)
// failed because its commit did: the StoreWatch writes it once the store
// takes writes again, so the ledger never shows it running for good. It
// asks for a pass now: the failure's own wake came before rec was queued,
// and a pass that ran in between found the store healthy and nothing to
// write, which left the turn running in the ledger for a whole period.
func (s *Service) retryOutcome(rec store.Turn, cause error) {
	rec.Status, rec.Error = store.TurnFailed, cause.Error()
	s.health.mu.Lock()
	s.health.pending[turnRef{rec.Key(), rec.Index}] = rec
	s.health.mu.Unlock()
	select {
	case s.health.wake <- struct{}{}:
	default: // a pass is asked for already; it reads pending when it runs
	}
}

// StoreWatch probes the store (store.Prober) every interval, and with a
// backoff from storeRetryMin after a failed write, and writes the
// outcomes of turns whose commit failed until the ledger holds them:
// readiness follows the store, and a turn whose end could not be written
// converges to failed once the store is back (or, if the runner stops
// first, to interrupted at its next start: Recover).
type StoreWatch struct {
	svc      *Service
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
}

// storeRetryMin is the first wait after a failed write; it doubles up to
// the watch's interval.
const storeRetryMin = 100 * time.Millisecond

// WatchStore returns the service's store watch, probing every interval
// once started.
func (s *Service) WatchStore(interval time.Duration) *StoreWatch {
	return &StoreWatch{svc: s, interval: interval}
}

// Start runs the watch until Stop. A non-positive interval starts
// nothing. Start and Stop are called from one goroutine.
func (w *StoreWatch) Start() {
	if w.interval <= 0 || w.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	w.svc.health.watched.Store(true)
	go func() {
		defer close(w.done)
		backoff := storeRetryMin
		timer := time.NewTimer(w.interval)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.svc.health.wake:
			case <-timer.C:
			}
			wait := w.interval
			if !w.pass(ctx) {
				wait, backoff = min(backoff, w.interval), min(2*backoff, w.interval)
			} else {
				backoff = storeRetryMin
			}
			timer.Reset(wait)
		}
	}()
}

// Stop ends the watch and waits for a pass under way.
func (w *StoreWatch) Stop() {
	if w.done == nil {
		return
	}
	w.cancel()
	<-w.done
	w.svc.health.watched.Store(false)
}

// pass writes the pending outcomes and probes the store; it reports
// whether the store is writable.
func (w *StoreWatch) pass(ctx context.Context) bool {
	s := w.svc
	ctx, cancel := context.WithTimeout(ctx, max(w.interval, 10*time.Second))
	defer cancel()
	s.health.mu.Lock()
	pending := make([]store.Turn, 0, len(s.health.pending))
	for _, rec := range s.health.pending {
		pending = append(pending, rec)
	}
	s.health.mu.Unlock()
	var err error
	for _, rec := range pending {
		if err = s.writeOutcome(ctx, rec); err != nil {
			break
		}
		s.health.mu.Lock()
		delete(s.health.pending, turnRef{rec.Key(), rec.Index})
		s.health.mu.Unlock()
	}
	if p, ok := s.store.(store.Prober); ok && err == nil {
		err = p.Probe(ctx)
	}
	if ctx.Err() != nil && err == nil {
		err = ctx.Err()
	}
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	was := s.health.err
	if err != nil {
		if errors.Is(err, context.Canceled) && was == nil {
			return true // stopping
		}
		s.health.err = errStoreUnwritable(fmt.Errorf("%s cannot be written: %w", s.storeName(), err))
		if was == nil {
			s.log.Error("store cannot be written; not ready", logkey.Error, err)
		}
		return false
	}
	s.health.err = nil
	if was != nil {
		s.log.Info("store writable again; ready")
	}
	return true
}

// writeOutcome ends the pending turn rec unless the ledger already holds
// its end, or holds no such turn (its begin was never written; another
// turn may have the index since).
func (s *Service) writeOutcome(ctx context.Context, rec store.Turn) error {
	cur, err := s.store.GetTurn(ctx, rec.Key(), rec.Index)
	if errors.Is(err, errdefs.ErrNotFound) || err == nil && (cur.TurnID != rec.TurnID || cur.Status.Ended() && cur.Status != store.TurnPaused) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := s.store.EndTurn(ctx, rec); err != nil && !refused(err) {
		return err
	}
	s.log.Info("recorded the outcome of a turn whose commit had failed", logkey.Session, rec.SessionID, logkey.Turn, rec.TurnID, "status", rec.Status)
	return nil
}
