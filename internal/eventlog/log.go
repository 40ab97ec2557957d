package eventlog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
)

// Log writes one turn's events to the store in batches, off the
// harness's reader goroutine, and is flushed before the turn's result is
// returned. Events wait in a slice, not a channel: a turn has a handful,
// and a channel big enough for a streaming harness's bursts would cost
// every turn its allocation. A drainer goroutine runs only while there is
// something to write, and starts only once the first pending event has
// waited its delay (or CommitBurst events wait): a turn that ends
// before that — most warm turns — is committed whole, begin, events and
// outcome, in one transaction by the turn itself. Followers lose nothing
// meanwhile: the hub hands them what is published but not committed.
type Log struct {
	st      Ledger
	session store.SessionKey
	log     *slog.Logger
	delay   time.Duration   // before the drainer starts
	begun   chan struct{}   // closed once begin is committed (or failed)
	drainer sync.WaitGroup  // the drainer running now, if any
	saved   func(seq int64) // told the last sequence number of each commit
	gen     int64           // the fence of its appends

	// mu guards the following.
	mu       sync.Mutex
	pending  []store.Event
	timer    *time.Timer // armed: starts the drainer after delay
	draining bool        // a drainer runs or is armed (or the turn drains the rest)
	closing  bool        // the last event is in
	begin    *store.Turn // the turn to begin with the first batch
	end      *store.Turn // the outcome committed with the last batch
	err      error       // the first write error
	beginErr error       // recording begin failed
	endErr   error       // recording end failed
}

// Ledger is what the event log writes to.
type Ledger interface {
	store.Events
	store.Turns
}

// MaxBatch bounds one append transaction.
const MaxBatch = 1024

// DefaultCommitDelay is how long an event may wait in memory before the
// log starts committing (the runner's Config.EventCommitDelay): what a turn loses at
// most, besides the turn itself (interrupted), if the runner dies.
// CommitBurst events start it at once.
const (
	DefaultCommitDelay = 10 * time.Millisecond
	CommitBurst        = 64
)

// Options are a Log's settings beside its store and session.
type Options struct {
	Log *slog.Logger
	// Begin, when set (the store must be a store.TurnWriter), is begun in
	// the first batch's transaction, beside the harness, instead of in a
	// commit of its own before it.
	Begin *store.Turn
	// Generation is the session lease's generation the turn holds: every
	// append carries it (Events.AppendFencedEvents), and the store refuses
	// them once another replica has taken the session over. The begin and
	// the outcome carry their own (store.Turn.Generation). 0: unfenced.
	Generation int64
	// Delay is how long the first pending event waits before a drainer
	// starts (DefaultCommitDelay when zero).
	Delay time.Duration
	// Saved, when set, is told the last sequence number of each commit.
	Saved func(seq int64)
}

// New opens a turn's log in session.
func New(st Ledger, session store.SessionKey, o Options) *Log {
	if o.Delay <= 0 {
		o.Delay = DefaultCommitDelay
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	l := &Log{st: st, session: session, log: o.Log, delay: o.Delay, saved: o.Saved, gen: o.Generation, begun: make(chan struct{}), begin: o.Begin}
	if o.Begin == nil {
		close(l.begun)
	}
	return l
}

// AwaitBegin waits until the turn's begin is committed and returns its
// error: a turn whose begin failed is not in the ledger and must fail.
func (l *Log) AwaitBegin() error {
	<-l.begun
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.beginErr
}

// Add queues e and arms a drainer unless one runs or is armed; a burst
// starts the armed one at once.
func (l *Log) Add(e store.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, e)
	switch {
	case l.closing:
	case !l.draining:
		l.draining = true
		l.drainer.Add(1)
		l.timer = time.AfterFunc(l.delay, l.fire)
	case l.timer != nil && len(l.pending) >= CommitBurst && l.timer.Stop():
		l.timer = nil
		go l.fire()
	}
}

// fire is the armed drainer starting.
func (l *Log) fire() {
	defer l.drainer.Done()
	l.mu.Lock()
	l.timer = nil
	l.mu.Unlock()
	l.drain()
}

// take takes the next batch, with the begin and the outcome to commit
// with it; false when there is nothing (the drainer then stops).
func (l *Log) take(batch []store.Event) (_ []store.Event, begin, end *store.Turn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		// A commit failed: the log has a gap, and the store likely fails
		// the rest too, each after its timeout. Nothing more is written;
		// the turn fails and the StoreWatch records its outcome.
		l.pending, l.end, l.draining = l.pending[:0], nil, false
		return nil, nil, nil, false
	}
	n := min(len(l.pending), MaxBatch)
	batch = append(batch[:0], l.pending[:n]...)
	l.pending = append(l.pending[:0], l.pending[n:]...)
	if l.closing && len(l.pending) == 0 {
		end, l.end = l.end, nil
	}
	if n == 0 && end == nil {
		l.draining = false
		return nil, nil, nil, false
	}
	begin, l.begin = l.begin, nil
	return batch, begin, end, true
}

// drain commits batches until nothing is pending. Group commit without a
// timer: what arrives while one batch commits goes into the next, so a
// streaming harness is not held to one transaction per event, and a
// quiet one waits for nothing.
func (l *Log) drain() {
	var batch []store.Event
	for {
		var begin, end *store.Turn
		var ok bool
		if batch, begin, end, ok = l.take(batch); !ok {
			return
		}
		// The log must survive the caller's disconnect: its own context.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		last, err := l.commit(ctx, batch, begin, end)
		cancel()
		if err != nil {
			l.mu.Lock()
			if l.err == nil {
				l.err = err
			}
			l.mu.Unlock()
			l.log.Error("event log append failed", logkey.Error, err, "events", len(batch))
			continue
		}
		if len(batch) == 0 {
			continue
		}
		if l.saved != nil {
			l.saved(batch[len(batch)-1].Seq)
		}
		if want := batch[len(batch)-1].Seq; want != 0 && want != last {
			l.log.Warn("event log sequence drift", "want", want, "got", last)
		}
	}
}

// commit writes batch, with begin before it and end after it when set:
// in one transaction each when the store can, else the outcome first.
func (l *Log) commit(ctx context.Context, batch []store.Event, begin, end *store.Turn) (int64, error) {
	if begin != nil && end != nil {
		_, last, err := l.st.(store.TurnWriter).WriteTurnWithEvents(ctx, *begin, batch, *end)
		if errors.Is(err, store.ErrNotBegun) {
			l.setBeginErr(err)
			return last, err
		}
		l.setBeginErr(nil)
		return last, l.ended(err)
	}
	if begin != nil {
		last, err := l.st.(store.TurnWriter).BeginTurnWithEvents(ctx, *begin, batch)
		l.setBeginErr(err)
		return last, err
	}
	if end == nil {
		return l.st.AppendFencedEvents(ctx, l.session, l.gen, batch)
	}
	if tw, ok := l.st.(store.TurnWriter); ok {
		_, last, err := tw.EndTurnWithEvents(ctx, *end, batch)
		return last, l.ended(err)
	}
	_, err := l.st.EndTurn(ctx, *end)
	if errors.Is(err, errdefs.ErrFenced) {
		return 0, err // nor are the events: the session is another's
	}
	_ = l.ended(err) // the events are appended whatever the outcome's fate
	return l.st.AppendFencedEvents(ctx, l.session, l.gen, batch)
}

// ended records err, the outcome's write error, and returns the log's:
// a refused outcome (the first one stands) still wrote the events.
func (l *Log) ended(err error) error {
	if err != nil {
		l.mu.Lock()
		l.endErr = err
		l.mu.Unlock()
	}
	if errors.Is(err, errdefs.ErrConflict) {
		return nil
	}
	return err
}

func (l *Log) setBeginErr(err error) {
	l.mu.Lock()
	l.beginErr = err
	l.mu.Unlock()
	close(l.begun)
}

// Finish logs last, the turn's final event, commits it with the outcome
// end (nil for none), flushes and waits: in the caller's goroutine when
// no drainer runs, else the drainer takes it. It returns the error
// recording end and the first write error of the log.
func (l *Log) Finish(last store.Event, end *store.Turn) (endErr, err error) {
	l.mu.Lock()
	l.pending = append(l.pending, last)
	l.closing = true
	l.end = end
	inline := !l.draining
	if l.timer != nil && l.timer.Stop() {
		// The armed drainer never started: the turn commits it all.
		l.timer = nil
		l.drainer.Done()
		inline = true
	}
	l.draining = true
	l.mu.Unlock()
	if inline {
		l.drain()
	}
	l.drainer.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endErr, l.err
}
