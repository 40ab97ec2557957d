// Package pool keeps harness sessions warm between turns: after a clean
// turn the session's sandbox and harness process stay alive for an idle
// TTL (longer when the turn paused for approval), at most Max of them,
// evicting the least recently used idle entry first. A checked-out entry
// belongs to its turn until it is parked again or released.
//
// The pool does not know what it holds: an entry carries a Release
// function that closes the harness and destroys the sandbox. Timers come
// from an injected Clock so tests need no sleeps.
package pool

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
)

// Teardown reasons (docs/contract.md, Sessions): a closed list; each says whether the
// sandbox may be parked (stopped, resumable) or must be deleted.
const (
	ReasonIdleExpiry        = "idle-expiry"
	ReasonApprovalExpiry    = "approval-ttl-expire"
	ReasonEvicted           = "lru-evicted"
	ReasonContinuityInvalid = "continuity-invalid"
	ReasonRuntimeChanged    = "runtime-incompatible"
	ReasonSessionIncompat   = "session-incompatible"
	ReasonKill              = "kill"
	ReasonFailedTurn        = "failed-turn"
	// ReasonSetupFailed: a new sandbox failed before its harness ran
	// (files, workspace, the harness's start), which may be the sandbox's
	// own doing; it is deleted, while a failed turn's sandbox, which
	// holds what the agent installed, is parked.
	ReasonSetupFailed      = "setup-failed"
	ReasonAborted          = "aborted"
	ReasonShutdownIdle     = "shutdown-idle"
	ReasonShutdownInFlight = "shutdown-in-flight"
	ReasonDeleted          = "session-deleted"
	ReasonCleanResumable   = "clean-resumable"
)

// Parkable says whether a teardown reason allows parking the sandbox
// instead of deleting it. Unknown reasons delete.
func Parkable(reason string) bool {
	switch reason {
	case ReasonIdleExpiry, ReasonApprovalExpiry, ReasonEvicted, ReasonContinuityInvalid,
		ReasonSessionIncompat, ReasonShutdownIdle, ReasonCleanResumable, ReasonFailedTurn:
		return true
	}
	return false
}

// Clock is the time source; tests pass a fake.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable timer.
type Timer interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Config configures a Pool.
type Config struct {
	Max         int
	IdleTTL     time.Duration
	ApprovalTTL time.Duration
	// TeardownTimeout bounds one Release.
	TeardownTimeout time.Duration
	Clock           Clock
	Logger          *slog.Logger
	// OnRelease, if set, is told of every teardown and its reason.
	OnRelease func(key, reason string)
}

// Entry is one warm session.
type Entry struct {
	Key string
	// Value is the caller's own state (sandbox, session, fingerprints).
	Value any
	// Release tears the entry down; reason is one of the Reason constants.
	Release func(ctx context.Context, reason string)

	awaiting bool
	lastUsed time.Time
	parked   uint64 // park order: breaks lastUsed ties (a coarse or fake clock)
	timer    Timer
}

// Awaiting reports whether the entry was parked waiting for approval.
func (e *Entry) Awaiting() bool { return e.awaiting }

// Pool holds warm entries.
type Pool struct {
	cfg Config
	log *slog.Logger
	wg  sync.WaitGroup

	// mu guards the following.
	mu      sync.Mutex
	entries map[string]*Entry
	parks   uint64
	// releasing holds keys whose teardown is under way; a Checkout of the
	// key waits for it, so a new turn never races the old sandbox's park.
	releasing map[string]chan struct{}
	closed    bool
}

// New returns an empty pool.
func New(cfg Config) *Pool {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TeardownTimeout <= 0 {
		cfg.TeardownTimeout = 10 * time.Second
	}
	if cfg.Max <= 0 {
		cfg.Max = 8
	}
	return &Pool{cfg: cfg, log: cfg.Logger, entries: map[string]*Entry{}, releasing: map[string]chan struct{}{}}
}

// Checkout takes the key's entry out of the pool: the caller now owns it
// and must Park or Release it. If the key's entry is being torn down, it
// first waits for that to finish (and then finds nothing).
func (p *Pool) Checkout(key string) (*Entry, bool) {
	p.mu.Lock()
	for {
		ch, ok := p.releasing[key]
		if !ok {
			break
		}
		p.mu.Unlock()
		<-ch
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	e, ok := p.entries[key]
	if !ok {
		return nil, false
	}
	delete(p.entries, key)
	if e.timer != nil {
		e.timer.Stop()
	}
	return e, true
}

// Park puts an entry back, warm, for the idle TTL or, when awaiting
// approval, the approval TTL. An entry already parked under the key is
// released first (superseded). Over Max, the least recently used idle
// entry is evicted; entries awaiting approval are never evicted for room.
// Park on a closed pool releases the entry.
func (p *Pool) Park(e *Entry, awaiting bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.release(e, ReasonShutdownIdle)
		return
	}
	var victims []*Entry
	if old, ok := p.entries[e.Key]; ok && old != e {
		delete(p.entries, e.Key)
		if old.timer != nil {
			old.timer.Stop()
		}
		victims = append(victims, old)
	}
	e.awaiting = awaiting
	e.lastUsed = p.cfg.Clock.Now()
	p.parks++
	e.parked = p.parks
	ttl, reason := p.cfg.IdleTTL, ReasonIdleExpiry
	if awaiting {
		ttl, reason = p.cfg.ApprovalTTL, ReasonApprovalExpiry
	}
	p.entries[e.Key] = e
	e.timer = p.cfg.Clock.AfterFunc(ttl, func() { p.expire(e, reason) })
	for len(p.entries) > p.cfg.Max {
		v := p.oldestIdleLocked()
		if v == nil {
			break
		}
		delete(p.entries, v.Key)
		v.timer.Stop()
		victims = append(victims, v)
	}
	p.mu.Unlock()
	for _, v := range victims {
		reason := ReasonEvicted
		if v.Key == e.Key {
			reason = ReasonSessionIncompat
		}
		p.releaseAsync(v, reason)
	}
}

func (p *Pool) oldestIdleLocked() *Entry {
	var oldest *Entry
	for _, e := range p.entries {
		if e.awaiting {
			continue
		}
		if oldest == nil || e.lastUsed.Before(oldest.lastUsed) || (e.lastUsed.Equal(oldest.lastUsed) && e.parked < oldest.parked) {
			oldest = e
		}
	}
	return oldest
}

func (p *Pool) expire(e *Entry, reason string) {
	p.mu.Lock()
	cur, ok := p.entries[e.Key]
	if !ok || cur != e {
		p.mu.Unlock()
		return // checked out or replaced meanwhile
	}
	delete(p.entries, e.Key)
	p.mu.Unlock()
	p.releaseAsync(e, reason)
}

func (p *Pool) releaseAsync(e *Entry, reason string) {
	p.wg.Add(1)
	done := p.markReleasing(e.Key)
	go func() {
		defer p.wg.Done()
		defer done()
		p.release(e, reason)
	}()
}

// markReleasing records the key as being torn down until done is called.
func (p *Pool) markReleasing(key string) (done func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	prev := p.releasing[key]
	p.releasing[key] = ch
	p.mu.Unlock()
	return func() {
		if prev != nil {
			<-prev // an earlier teardown of the same key finishes first
		}
		p.mu.Lock()
		if p.releasing[key] == ch {
			delete(p.releasing, key)
		}
		p.mu.Unlock()
		close(ch)
	}
}

func (p *Pool) release(e *Entry, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.TeardownTimeout)
	defer cancel()
	p.log.Info("warm session released", logkey.Session, e.Key, logkey.Reason, reason)
	if e.Release != nil {
		e.Release(ctx, reason)
	}
	if p.cfg.OnRelease != nil {
		p.cfg.OnRelease(e.Key, reason)
	}
}

// Evict releases the key's entry, if parked, and waits for it.
func (p *Pool) Evict(key, reason string) bool {
	e, ok := p.Checkout(key)
	if ok {
		p.release(e, reason)
	}
	return ok
}

// TTL is how long an entry parked now stays: the approval TTL when it
// awaits a decision, else the idle TTL.
func (p *Pool) TTL(awaiting bool) time.Duration {
	if awaiting {
		return p.cfg.ApprovalTTL
	}
	return p.cfg.IdleTTL
}

// Has reports whether an entry is parked under key.
func (p *Pool) Has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.entries[key]
	return ok
}

// Awaiting reports whether the entry parked under key waits for approval.
func (p *Pool) Awaiting(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[key]
	return ok && e.awaiting
}

// Len is the number of parked entries.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Keys lists the parked keys (for operators and tests).
func (p *Pool) Keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.entries))
	for k := range p.entries {
		out = append(out, k)
	}
	return out
}

// Close releases every entry and waits for all teardowns, including ones
// started by timers.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	all := p.entries
	p.entries = map[string]*Entry{}
	p.mu.Unlock()
	for _, e := range all {
		if e.timer != nil {
			e.timer.Stop()
		}
		reason := ReasonShutdownIdle
		p.releaseAsync(e, reason)
	}
	p.wg.Wait()
}
