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
// returned.
type eventLog struct {
	st        store.Events
	sessionID string
	log       *slog.Logger
	ch        chan store.Event
	done      chan struct{}

	// mu guards err.
	mu  sync.Mutex
	err error
}

func newEventLog(st store.Events, sessionID string, log *slog.Logger) *eventLog {
	l := &eventLog{st: st, sessionID: sessionID, log: log, ch: make(chan store.Event, 4096), done: make(chan struct{})}
	go l.write()
	return l
}

func (l *eventLog) add(e store.Event) { l.ch <- e }

func (l *eventLog) write() {
	defer close(l.done)
	batch := make([]store.Event, 0, 1024)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for e := range l.ch {
		batch = append(batch[:0], e)
		// Group commit: a streaming harness sends events one by one, and a
		// transaction per event would cap the log at the store's commit
		// rate. Wait up to a millisecond for more.
		timer.Reset(time.Millisecond)
	drain:
		for len(batch) < cap(batch) {
			select {
			case e, ok := <-l.ch:
				if !ok {
					break drain
				}
				batch = append(batch, e)
			case <-timer.C:
				break drain
			}
		}
		timer.Stop()
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
	close(l.ch)
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
