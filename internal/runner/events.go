package runner

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// eventLog writes one turn's events to the store in batches, off the
// harness's reader goroutine, and is flushed before the turn's result is
// returned. Events wait in a slice, not a channel: a turn has a handful,
// and a channel big enough for a streaming harness's bursts would cost
// every turn its allocation.
type eventLog struct {
	st        store.Events
	sessionID string
	log       *slog.Logger
	wake      chan struct{} // a token when pending grew or the log closed
	done      chan struct{}

	// mu guards the following.
	mu      sync.Mutex
	pending []store.Event
	closing bool
	err     error
}

// maxEventBatch bounds one append transaction.
const maxEventBatch = 1024

func newEventLog(st store.Events, sessionID string, log *slog.Logger) *eventLog {
	l := &eventLog{st: st, sessionID: sessionID, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.write()
	return l
}

func (l *eventLog) add(e store.Event) {
	l.mu.Lock()
	l.pending = append(l.pending, e)
	l.mu.Unlock()
	l.signal()
}

func (l *eventLog) signal() {
	select {
	case l.wake <- struct{}{}:
	default: // the writer has a token already
	}
}

// next takes the next batch; false once the log is closed and drained.
func (l *eventLog) next(batch []store.Event) ([]store.Event, bool) {
	for {
		l.mu.Lock()
		n := min(len(l.pending), maxEventBatch)
		batch = append(batch[:0], l.pending[:n]...)
		l.pending = append(l.pending[:0], l.pending[n:]...)
		closing := l.closing
		l.mu.Unlock()
		if n > 0 {
			return batch, true
		}
		if closing {
			return nil, false
		}
		<-l.wake
	}
}

func (l *eventLog) write() {
	defer close(l.done)
	var batch []store.Event
	for {
		// Group commit without a timer: what arrives while one batch
		// commits goes into the next, so a streaming harness is not held
		// to one transaction per event, and a quiet one waits for nothing.
		var ok bool
		if batch, ok = l.next(batch); !ok {
			return
		}
		// The log must survive the caller's disconnect: its own context.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		last, err := l.st.AppendEvents(ctx, l.sessionID, batch)
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
		if want := batch[len(batch)-1].Seq; want != 0 && want != last {
			l.log.Warn("event log sequence drift", "want", want, "got", last)
		}
	}
}

// close flushes and waits; it returns the first write error.
func (l *eventLog) close() error {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	l.signal()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// hub fans a session's live events out to followers.
type hub struct {
	// mu guards the following.
	mu   sync.Mutex
	subs map[chan wire.Record]struct{}
}

// hubs holds one hub per session with followers or a running turn.
type hubs struct {
	mu sync.Mutex
	m  map[string]*hub
}

func (h *hubs) get(sessionID string) *hub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*hub{}
	}
	x, ok := h.m[sessionID]
	if !ok {
		x = &hub{subs: map[chan wire.Record]struct{}{}}
		h.m[sessionID] = x
	}
	return x
}

func (x *hub) subscribe() chan wire.Record {
	ch := make(chan wire.Record, 1024)
	x.mu.Lock()
	x.subs[ch] = struct{}{}
	x.mu.Unlock()
	return ch
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
	for ch := range x.subs {
		select {
		case ch <- rec:
		default:
			delete(x.subs, ch)
			close(ch)
		}
	}
}
