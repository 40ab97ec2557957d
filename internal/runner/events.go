package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// eventLog writes one turn's events to the store in batches, off the
// harness's reader goroutine, and is flushed before the turn's result is
// returned. Events wait in a slice, not a channel: a turn has a handful,
// and a channel big enough for a streaming harness's bursts would cost
// every turn its allocation. A drainer goroutine runs only while there is
// something to write, and starts only once the first pending event has
// waited its delay (or commitBurst events wait): a turn that ends
// before that — most warm turns — is committed whole, begin, events and
// outcome, in one transaction by the turn itself. Followers lose nothing
// meanwhile: the hub hands them what is published but not committed.
type eventLog struct {
	st      ledger
	session store.SessionKey
	log     *slog.Logger
	delay   time.Duration   // before the drainer starts
	begun   chan struct{}   // closed once begin is committed (or failed)
	drainer sync.WaitGroup  // the drainer running now, if any
	saved   func(seq int64) // told the last sequence number of each commit

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

// ledger is what the event log writes to.
type ledger interface {
	store.Events
	store.Turns
}

// maxEventBatch bounds one append transaction.
const maxEventBatch = 1024

// defaultCommitDelay is how long an event may wait in memory before the
// log starts committing (Config.EventCommitDelay): what a turn loses at
// most, besides the turn itself (interrupted), if the runner dies.
// commitBurst events start it at once.
const (
	defaultCommitDelay = 10 * time.Millisecond
	commitBurst        = 64
)

// newEventLog opens the turn's log. With begin set (the store must be a
// store.TurnWriter), the turn is begun in the first batch's transaction,
// beside the harness, instead of in a commit of its own before it.
func newEventLog(st ledger, session store.SessionKey, log *slog.Logger, begin *store.Turn, delay time.Duration) *eventLog {
	l := &eventLog{st: st, session: session, log: log, delay: delay, begun: make(chan struct{}), begin: begin}
	if begin == nil {
		close(l.begun)
	}
	return l
}

// awaitBegin waits until the turn's begin is committed and returns its
// error: a turn whose begin failed is not in the ledger and must fail.
func (l *eventLog) awaitBegin() error {
	<-l.begun
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.beginErr
}

// add queues e and arms a drainer unless one runs or is armed; a burst
// starts the armed one at once.
func (l *eventLog) add(e store.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, e)
	switch {
	case l.closing:
	case !l.draining:
		l.draining = true
		l.drainer.Add(1)
		l.timer = time.AfterFunc(l.delay, l.fire)
	case l.timer != nil && len(l.pending) >= commitBurst && l.timer.Stop():
		l.timer = nil
		go l.fire()
	}
}

// fire is the armed drainer starting.
func (l *eventLog) fire() {
	defer l.drainer.Done()
	l.mu.Lock()
	l.timer = nil
	l.mu.Unlock()
	l.drain()
}

// take takes the next batch, with the begin and the outcome to commit
// with it; false when there is nothing (the drainer then stops).
func (l *eventLog) take(batch []store.Event) (_ []store.Event, begin, end *store.Turn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		// A commit failed: the log has a gap, and the store likely fails
		// the rest too, each after its timeout. Nothing more is written;
		// the turn fails and the StoreWatch records its outcome.
		l.pending, l.end, l.draining = l.pending[:0], nil, false
		return nil, nil, nil, false
	}
	n := min(len(l.pending), maxEventBatch)
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
func (l *eventLog) drain() {
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
func (l *eventLog) commit(ctx context.Context, batch []store.Event, begin, end *store.Turn) (int64, error) {
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
		return l.st.AppendEvents(ctx, l.session, batch)
	}
	if tw, ok := l.st.(store.TurnWriter); ok {
		_, last, err := tw.EndTurnWithEvents(ctx, *end, batch)
		return last, l.ended(err)
	}
	_, err := l.st.EndTurn(ctx, *end)
	_ = l.ended(err) // the events are appended whatever the outcome's fate
	return l.st.AppendEvents(ctx, l.session, batch)
}

// ended records err, the outcome's write error, and returns the log's:
// a refused outcome (the first one stands) still wrote the events.
func (l *eventLog) ended(err error) error {
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

func (l *eventLog) setBeginErr(err error) {
	l.mu.Lock()
	l.beginErr = err
	l.mu.Unlock()
	close(l.begun)
}

// finish logs last, the turn's final event, commits it with the outcome
// end (nil for none), flushes and waits: in the caller's goroutine when
// no drainer runs, else the drainer takes it. It returns the error
// recording end and the first write error of the log.
func (l *eventLog) finish(last store.Event, end *store.Turn) (endErr, err error) {
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

// finish ends the turn's event log with done, committed together with the
// outcome end, and only then publishes done to followers and the caller:
// whoever sees done can read the outcome.
func (t *turn) finish(done wire.Event, end *store.Turn) error {
	t.mu.Lock()
	t.seq++
	seq := t.seq
	at := len(t.events)
	t.events = append(t.events, done)
	if t.observers != nil {
		t.observeEvent(done)
	}
	t.mu.Unlock()
	endErr, err := t.evlog.finish(store.Event{Seq: seq, TurnIndex: t.index, Time: time.Now(), Event: done}, end)
	if berr := t.evlog.awaitBegin(); berr != nil {
		// Not in the ledger (nothing of it was written): not done.
		t.beginErr = fmt.Errorf("record the turn in the ledger: %w", berr)
		err = errors.Join(err, t.beginErr)
	} else if endErr != nil {
		t.log.Error("record turn outcome", logkey.Error, endErr)
	}
	t.mu.Lock()
	if err != nil {
		// Not all on disk: not done, whatever the harness said.
		done.StopReason = "error"
		t.events[at] = done
	}
	t.hub.committed(seq) // committed, or failed for good: the log is all there will be
	t.hub.publish(wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &done})
	t.mu.Unlock()
	if t.sink != nil {
		t.sink(seq, done)
	}
	return err
}

// hub fans a session's live events out to followers.
//
// A turn publishes an event before the event log commits it, so a
// follower that subscribes and then reads the log could miss the events
// published before it subscribed and committed after its read: the hub
// keeps those (published, not yet committed) and hands them to each new
// follower with its subscription.
type hub struct {
	parent *hubs
	id     store.SessionKey
	users  int // followers and running turns holding it; parent.mu guards it

	// mu guards the following.
	mu      sync.Mutex
	subs    map[chan wire.Record]struct{}
	unsaved recordRing // published, not yet committed, in order
	saved   int64      // the last committed sequence number
}

// maxUnsaved bounds what a hub keeps for new followers when the log's
// commits fall behind or fail; a follower that needs more resumes later
// from the log.
const maxUnsaved = 4096

// hubs holds one hub per session with followers or a running turn; a
// hub nobody holds and with nothing uncommitted is dropped, so the map
// does not grow with every session ever seen.
type hubs struct {
	mu sync.Mutex
	m  map[store.SessionKey]*hub
}

// acquire returns the session's hub, held until release.
func (h *hubs) acquire(k store.SessionKey) *hub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[store.SessionKey]*hub{}
	}
	x, ok := h.m[k]
	if !ok {
		x = &hub{parent: h, id: k, subs: map[chan wire.Record]struct{}{}}
		h.m[k] = x
	}
	x.users++
	return x
}

// release lets go of a hub acquire returned.
func (x *hub) release() {
	x.parent.mu.Lock()
	defer x.parent.mu.Unlock()
	x.users--
	x.pruneLocked()
}

// pruneLocked drops x from its parent when nobody holds it and it keeps
// nothing a later follower would need. parent.mu must be held.
func (x *hub) pruneLocked() {
	if x.users > 0 || x.parent.m[x.id] != x {
		return
	}
	x.mu.Lock()
	idle := x.unsaved.n == 0
	x.mu.Unlock()
	if idle {
		delete(x.parent.m, x.id)
	}
}

// subscribe returns the live channel and the records published but not
// yet committed to the log when it subscribed.
func (x *hub) subscribe() (chan wire.Record, []wire.Record) {
	ch := make(chan wire.Record, 1024)
	x.mu.Lock()
	x.subs[ch] = struct{}{}
	unsaved := x.unsaved.list()
	x.mu.Unlock()
	return ch, unsaved
}

// committed drops what the log now holds, up to seq.
func (x *hub) committed(seq int64) {
	x.mu.Lock()
	x.saved = max(x.saved, seq)
	x.unsaved.dropThrough(x.saved)
	empty := x.unsaved.n == 0
	x.mu.Unlock()
	if empty {
		// What a released hub kept may now be gone: nothing holds it.
		x.parent.mu.Lock()
		x.pruneLocked()
		x.parent.mu.Unlock()
	}
}

func (x *hub) unsubscribe(ch chan wire.Record) {
	x.mu.Lock()
	if _, ok := x.subs[ch]; ok {
		delete(x.subs, ch)
		close(ch)
	}
	x.mu.Unlock()
}

// publish never blocks the turn: a follower that falls 1024 records
// behind is cut off and resumes from its last sequence number.
func (x *hub) publish(rec wire.Record) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if rec.Seq > x.saved {
		x.unsaved.push(rec, maxUnsaved)
	}
	for ch := range x.subs {
		select {
		case ch <- rec:
		default:
			delete(x.subs, ch)
			close(ch)
		}
	}
}

// recordRing is a FIFO of records, oldest first, bounded by the limit
// push is given: at the bound the oldest goes in O(1), where a slice
// would shift every record per event.
type recordRing struct {
	buf  []wire.Record
	head int // index of the oldest
	n    int
}

// push appends rec, dropping the oldest when limit records wait. The
// buffer grows by doubling up to limit, so a hub that keeps a few
// records costs a few.
func (r *recordRing) push(rec wire.Record, limit int) {
	if r.n == len(r.buf) {
		if r.n >= limit {
			r.buf[r.head] = rec
			r.head = (r.head + 1) % len(r.buf)
			return
		}
		grown := make([]wire.Record, min(max(2*len(r.buf), 16), limit))
		r.copyTo(grown)
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = rec
	r.n++
}

// dropThrough drops the oldest records while their sequence number is at
// most seq.
func (r *recordRing) dropThrough(seq int64) {
	for r.n > 0 && r.buf[r.head].Seq <= seq {
		r.buf[r.head] = wire.Record{} // let the event go
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
}

// list returns a copy of the records, oldest first.
func (r *recordRing) list() []wire.Record {
	if r.n == 0 {
		return nil
	}
	out := make([]wire.Record, r.n)
	r.copyTo(out)
	return out
}

func (r *recordRing) copyTo(dst []wire.Record) {
	k := copy(dst[:r.n], r.buf[r.head:min(r.head+r.n, len(r.buf))])
	copy(dst[k:r.n], r.buf[:r.n-k])
}
