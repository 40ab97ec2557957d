package sandboxd

import (
	"context"
	"errors"
	"sync"
)

// Event is one record of an entry's output log, one NDJSON line on the
// wire. Exactly one of Data (with Stream) and Exit is set on a numbered
// event; a heartbeat has Seq 0 and only Heartbeat set.
type Event struct {
	Seq       int64       `json:"seq,omitempty"`
	Stream    string      `json:"stream,omitempty"` // "stdout" or "stderr"
	Data      []byte      `json:"data,omitempty"`
	Exit      *ExitStatus `json:"exit,omitempty"`
	Heartbeat bool        `json:"heartbeat,omitempty"`
}

// ExitStatus is how an entry ended.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	// Error is set when the entry could not run or was lost, rather than
	// exiting by itself.
	Error string `json:"error,omitempty"`
}

// errGone is returned by read when the reader asks for events it already
// acknowledged; that is a client bug, never a lost connection.
var errGone = errors.New("events before the requested sequence were acknowledged and dropped")

// eventLog holds an entry's output from the last acknowledged event on.
// Producers block in append while the unacknowledged bytes exceed max, so a
// slow or absent reader pushes back on the process rather than losing data.
type eventLog struct {
	max int

	// mu guards the following.
	mu      sync.Mutex
	events  []Event // ascending Seq, all > acked
	acked   int64   // highest acknowledged seq
	next    int64   // seq of the next event
	pending int     // bytes of Data in events
	final   bool    // the exit event is appended; nothing follows it
	aborted bool    // appends are dropped (the entry was killed)
	changed chan struct{}
}

func newEventLog(max int) *eventLog {
	return &eventLog{max: max, next: 1, changed: make(chan struct{})}
}

// broadcast wakes everyone waiting on the log. Called with mu held.
func (l *eventLog) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// append adds data from stream, waiting while the log is full. It returns
// false once the log is aborted or ctx is done.
func (l *eventLog) append(ctx context.Context, stream string, data []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.pending >= l.max && !l.aborted && !l.final {
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			l.mu.Lock()
			return false
		}
		l.mu.Lock()
	}
	if l.aborted || l.final {
		return false
	}
	l.events = append(l.events, Event{Seq: l.next, Stream: stream, Data: data})
	l.next++
	l.pending += len(data)
	l.broadcast()
	return true
}

// finish appends the exit event; the log is complete afterwards.
func (l *eventLog) finish(st ExitStatus) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.final {
		return
	}
	l.events = append(l.events, Event{Seq: l.next, Exit: &st})
	l.next++
	l.final = true
	l.broadcast()
}

// abort makes waiting and later appends return at once; the data they
// carry is dropped, which is what kill means.
func (l *eventLog) abort() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.aborted = true
	l.broadcast()
}

// ack drops the events up to and including seq.
func (l *eventLog) ack(seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq <= l.acked {
		return
	}
	if seq >= l.next {
		seq = l.next - 1
	}
	n := 0
	for n < len(l.events) && l.events[n].Seq <= seq {
		l.pending -= len(l.events[n].Data)
		n++
	}
	if n > 0 {
		// The exit event stays readable: a reader that acked everything
		// may still reconnect and must then see the end, not a hang.
		if l.final && n == len(l.events) {
			n--
			if n == 0 {
				return
			}
			seq = l.events[n-1].Seq
		}
		l.events = append([]Event(nil), l.events[n:]...)
	}
	l.acked = seq
	l.broadcast()
}

// read returns the events after seq, and a channel closed when more may
// be available. done reports that the returned events end the log.
func (l *eventLog) read(after int64) (evs []Event, changed <-chan struct{}, done bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after < l.acked {
		return nil, nil, false, errGone
	}
	i := 0
	for i < len(l.events) && l.events[i].Seq <= after {
		i++
	}
	evs = l.events[i:]
	done = l.final && (len(evs) > 0 || after >= l.next-1)
	return evs, l.changed, done, nil
}
