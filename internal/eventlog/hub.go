package eventlog

import (
	"sync"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// Hub fans a session's live events out to followers.
//
// A turn publishes an event before the event log commits it, so a
// follower that subscribes and then reads the log could miss the events
// published before it subscribed and committed after its read: the hub
// keeps those (published, not yet committed) and hands them to each new
// follower with its subscription.
type Hub struct {
	parent *Hubs
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

// Hubs holds one hub per session with followers or a running turn; a
// hub nobody holds and with nothing uncommitted is dropped, so the map
// does not grow with every session ever seen.
type Hubs struct {
	mu sync.Mutex
	m  map[store.SessionKey]*Hub
}

// Acquire returns the session's hub, held until Release.
func (h *Hubs) Acquire(k store.SessionKey) *Hub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[store.SessionKey]*Hub{}
	}
	x, ok := h.m[k]
	if !ok {
		x = &Hub{parent: h, id: k, subs: map[chan wire.Record]struct{}{}}
		h.m[k] = x
	}
	x.users++
	return x
}

// Len is how many hubs are kept now.
func (h *Hubs) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// Release lets go of a hub Acquire returned.
func (x *Hub) Release() {
	x.parent.mu.Lock()
	defer x.parent.mu.Unlock()
	x.users--
	x.pruneLocked()
}

// pruneLocked drops x from its parent when nobody holds it and it keeps
// nothing a later follower would need. parent.mu must be held.
func (x *Hub) pruneLocked() {
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

// Subscribe returns the live channel and the records published but not
// yet committed to the log when it subscribed.
func (x *Hub) Subscribe() (chan wire.Record, []wire.Record) {
	ch := make(chan wire.Record, 1024)
	x.mu.Lock()
	x.subs[ch] = struct{}{}
	unsaved := x.unsaved.list()
	x.mu.Unlock()
	return ch, unsaved
}

// Committed drops what the log now holds, up to seq.
func (x *Hub) Committed(seq int64) {
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

// Unsubscribe ends a subscription and closes its channel, unless the hub
// already cut it off.
func (x *Hub) Unsubscribe(ch chan wire.Record) {
	x.mu.Lock()
	if _, ok := x.subs[ch]; ok {
		delete(x.subs, ch)
		close(ch)
	}
	x.mu.Unlock()
}

// Publish never blocks the turn: a follower that falls 1024 records
// behind is cut off and resumes from its last sequence number.
func (x *Hub) Publish(rec wire.Record) {
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
