package runner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
)

// Reaper periodically deletes the remote sandboxes this runner made that
// no session owns: those whose session was deleted while they were parked,
// those a failed reopen gave up on, those a crash left between create and
// record. Recover does the same once at start-up from the store's records;
// the reaper also finds sandboxes the store never heard of, by asking each
// provider that is a sandbox.Lister and sandbox.Remover.
//
// A sandbox is owned when an active session names it as its sandbox, or
// the store's record of it is not destroyed and its session is active (or
// it has no session: a session-less turn is using it and destroys it at
// its end). A sandbox with no record at all may be one whose create has
// not returned yet, so it is deleted only when a second pass, an interval
// later, still finds it unrecorded.
type Reaper struct {
	svc      *Service
	interval time.Duration
	clock    pool.Clock

	// mu serialises passes and guards suspects.
	mu       sync.Mutex
	suspects map[string]bool // provider/id seen unrecorded by the last pass

	cancel context.CancelFunc
	done   chan struct{}
}

// Reaper returns the service's reaper, passing every interval once
// started. The interval runs on Config.PoolClock when it is set.
func (s *Service) Reaper(interval time.Duration) *Reaper {
	var clock pool.Clock = realTimers{}
	if s.cfg.PoolClock != nil {
		clock = s.cfg.PoolClock
	}
	return &Reaper{svc: s, interval: interval, clock: clock, suspects: map[string]bool{}}
}

type realTimers struct{}

func (realTimers) Now() time.Time { return time.Now() }
func (realTimers) AfterFunc(d time.Duration, f func()) pool.Timer {
	return time.AfterFunc(d, f)
}

// Start runs a pass every interval until Stop. A non-positive interval
// starts nothing. Start and Stop are called from one goroutine.
func (r *Reaper) Start() {
	if r.interval <= 0 || r.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	// Armed before Start returns, so that a test clock advanced right
	// after Start fires it.
	tick, t := r.arm()
	go func() {
		defer close(r.done)
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-tick:
			}
			// A pass that hangs on the API must not hold up the next ones
			// forever; the next pass retries whatever this one missed.
			pctx, pcancel := context.WithTimeout(ctx, max(r.interval, 5*time.Minute))
			n, err := r.ReapOnce(pctx)
			pcancel()
			if err != nil && ctx.Err() == nil {
				r.svc.log.Warn("sandbox reaper pass", logkey.Error, err, "removed", n)
			}
			tick, t = r.arm()
		}
	}()
}

// arm returns a channel closed one interval from now.
func (r *Reaper) arm() (<-chan struct{}, pool.Timer) {
	tick := make(chan struct{})
	return tick, r.clock.AfterFunc(r.interval, func() { close(tick) })
}

// Stop ends the loop and waits for a pass under way to finish.
func (r *Reaper) Stop() {
	if r.done == nil {
		return
	}
	r.cancel()
	<-r.done
}

// ReapOnce makes one pass: it deletes every listed sandbox no session
// owns and records it destroyed. It returns how many it deleted; errors
// of one provider or sandbox do not stop the others.
func (r *Reaper) ReapOnce(ctx context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.svc
	names := make([]string, 0, len(s.providers))
	for name := range s.providers {
		names = append(names, name)
	}
	sort.Strings(names)

	var errs []error
	removed := 0
	suspects := map[string]bool{}
	var current map[string]bool // provider/id of active sessions' sandboxes, read once
	for _, name := range names {
		l, ok := s.providers[name].(sandbox.Lister)
		rm, ok2 := s.providers[name].(sandbox.Remover)
		if !ok || !ok2 {
			continue
		}
		ids, err := l.ListIDs(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s sandboxes: %w", name, err))
			continue
		}
		if len(ids) == 0 {
			continue
		}
		if current == nil {
			if current, err = r.activeSandboxes(ctx); err != nil {
				return removed, errors.Join(append(errs, err)...)
			}
		}
		for _, id := range ids {
			key := name + "/" + id
			if current[key] {
				continue
			}
			rec, found, err := r.owner(ctx, name, id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if found && ownedBy(ctx, s.store, rec) {
				continue
			}
			if !found && !r.suspects[key] {
				suspects[key] = true // perhaps still being created: next pass
				continue
			}
			log := s.log.With(logkey.Provider, name, logkey.Sandbox, id)
			if err := rm.Remove(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				errs = append(errs, fmt.Errorf("reap %s sandbox %s: %w", name, id, err))
				if !found {
					suspects[key] = true
				}
				continue
			}
			removed++
			if !found {
				rec = store.Sandbox{Provider: name, ID: id}
			}
			rec.State = store.SandboxDestroyed
			if _, err := s.store.PutSandbox(ctx, rec); err != nil {
				errs = append(errs, fmt.Errorf("record reaped %s sandbox %s: %w", name, id, err))
			}
			log.Info("reaped a sandbox no session owns", "recorded", found, logkey.Session, rec.SessionID)
		}
	}
	r.suspects = suspects
	return removed, errors.Join(errs...)
}

// activeSandboxes returns provider/id of every active session's sandbox.
func (r *Reaper) activeSandboxes(ctx context.Context) (map[string]bool, error) {
	sessions, err := r.svc.store.ListSessions(ctx, store.SessionQuery{Status: store.SessionActive})
	if err != nil {
		return nil, fmt.Errorf("list active sessions: %w", err)
	}
	out := make(map[string]bool, len(sessions))
	for _, sess := range sessions {
		if sess.SandboxID != "" {
			out[sess.SandboxProvider+"/"+sess.SandboxID] = true
		}
	}
	return out, nil
}

// owner returns the store's record of sandbox id, and whether there is one.
func (r *Reaper) owner(ctx context.Context, provider, id string) (store.Sandbox, bool, error) {
	rec, err := r.svc.store.GetSandbox(ctx, provider, id)
	switch {
	case err == nil:
		return rec, true, nil
	case errors.Is(err, errdefs.ErrNotFound):
		return store.Sandbox{}, false, nil
	}
	return rec, false, fmt.Errorf("read the record of %s sandbox %s: %w", provider, id, err)
}

// ownedBy reports whether rec's sandbox is still in use by its session.
func ownedBy(ctx context.Context, st store.Store, rec store.Sandbox) bool {
	if rec.State == store.SandboxDestroyed {
		return false
	}
	if rec.SessionID == "" {
		return true // a session-less turn's, destroyed when the turn ends
	}
	sess, err := st.GetSession(ctx, rec.SessionKey())
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return true // unknown: keep it, the next pass asks again
	}
	return err == nil && sess.Status == store.SessionActive
}
