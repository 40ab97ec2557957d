package agenta

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrunner/runner/internal/platform"
)

// queue delivers platform calls off the turn's path: one lane per
// session keeps its calls in order, a failed call is retried with
// backoff until the platform takes it (or refuses it, or RetryFor
// passes), and a full queue drops and counts instead of blocking.
type queue struct {
	cfg *Config
	log *slog.Logger
	// ctx ends the retries when Close's deadline passes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sent, retried, dropped atomic.Int64

	// mu guards the following.
	mu       sync.Mutex
	lanes    map[string]*lane
	pending  int
	closed   bool
	warnedAt time.Time
}

type lane struct {
	jobs    []func(context.Context)
	running bool
}

func newQueue(cfg *Config) *queue {
	ctx, cancel := context.WithCancel(context.Background())
	return &queue{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, lanes: map[string]*lane{}}
}

// push queues job on the session's lane; it never blocks. It reports
// false when the call was dropped (queue full or closed).
func (q *queue) push(session string, job func(context.Context)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.pending >= q.cfg.QueueMax {
		q.dropped.Add(1)
		if time.Since(q.warnedAt) > 10*time.Second {
			q.warnedAt = time.Now()
			q.log.Warn("platform mirror queue full; dropping calls (raise AGENTA_RUNNER_PLATFORM_QUEUE_MAX or check the platform API)", "pending", q.pending, "dropped", q.dropped.Load())
		}
		return false
	}
	l := q.lanes[session]
	if l == nil {
		l = &lane{}
		q.lanes[session] = l
	}
	l.jobs = append(l.jobs, job)
	q.pending++
	if !l.running {
		l.running = true
		q.wg.Add(1)
		go q.drain(session, l)
	}
	return true
}

func (q *queue) drain(session string, l *lane) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		if len(l.jobs) == 0 {
			l.running = false
			delete(q.lanes, session)
			q.mu.Unlock()
			return
		}
		job := l.jobs[0]
		l.jobs[0] = nil
		l.jobs = l.jobs[1:]
		q.mu.Unlock()
		job(q.ctx)
		q.mu.Lock()
		q.pending--
		q.mu.Unlock()
	}
}

// deliver runs one call until the platform takes it. A refusal (4xx but
// 401/408/429) is final; so is RetryFor passing or the queue closing.
func (q *queue) deliver(ctx context.Context, what string, call func(context.Context) error) error {
	start := time.Now()
	wait := q.cfg.RetryBase
	warned := false
	for {
		err := call(ctx)
		q.cfg.Metrics.PlatformCall(what, err)
		if err == nil {
			q.sent.Add(1)
			if warned {
				q.log.Info("platform reachable again; call delivered", "call", what, "after_ms", time.Since(start).Milliseconds())
			}
			return nil
		}
		if !retryable(err) || time.Since(start) > q.cfg.RetryFor || ctx.Err() != nil {
			q.dropped.Add(1)
			q.log.Warn("platform call dropped", "call", what, "err", err)
			return err
		}
		q.retried.Add(1)
		if !warned {
			warned = true
			q.log.Warn("platform call failed; retrying in the background (turns are not affected)", "call", what, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(wait*2, q.cfg.RetryMax)
	}
}

func (q *queue) stats() platform.Stats {
	q.mu.Lock()
	n := q.pending
	q.mu.Unlock()
	return platform.Stats{Queued: int64(n), Sent: q.sent.Load(), Retried: q.retried.Load(), Dropped: q.dropped.Load()}
}

// close refuses new calls and waits for the queued ones, until ctx ends;
// then their retries stop.
func (q *queue) close(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
		q.cancel()
		return nil
	case <-ctx.Done():
		q.cancel()
		<-done
		return ctx.Err()
	}
}
