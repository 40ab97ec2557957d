package wire

import (
	"container/list"
	"hash/maphash"
	"sync"
)

// HistoryCache keeps the messages arrays of recent requests, decoded, so
// that the next request of a conversation, which repeats the whole
// history and adds a message or two, costs the decoding of what it adds
// (a comparison of bytes for the rest). Entries are found by a hash of
// the array's first keyBytes bytes and kept while they fit in maxBytes,
// least recently used out first. Safe for concurrent use.
//
// The messages it hands out share their content blocks with other
// requests: a decoded request's messages are read-only.
type HistoryCache struct {
	seed     maphash.Seed
	maxBytes int

	mu      sync.Mutex
	byKey   map[uint64]*list.Element // of *historyEntry
	order   *list.List               // most recently used first
	bytes   int
	lookups int64
	hits    int64
}

type historyEntry struct {
	key  uint64
	raw  string // the array from '[' to the end of its last message
	msgs []Message
}

// keyBytes is how much of an array names its entry: an array shorter than
// that is cheap to decode and never cached.
const keyBytes = 256

// NewHistoryCache keeps up to maxBytes of arrays (their decoded messages
// take about as much again).
func NewHistoryCache(maxBytes int) *HistoryCache {
	return &HistoryCache{seed: maphash.MakeSeed(), maxBytes: maxBytes, byKey: map[uint64]*list.Element{}, order: list.New()}
}

// lookup returns the messages of the cached array that b (a messages
// array from its '[') begins with, and that array's length; none is nil
// and 0.
func (c *HistoryCache) lookup(b []byte) ([]Message, int) {
	if c == nil || len(b) < keyBytes {
		return nil, 0
	}
	key := maphash.Bytes(c.seed, b[:keyBytes])
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups++
	el, ok := c.byKey[key]
	if !ok {
		return nil, 0
	}
	e := el.Value.(*historyEntry)
	if len(b) < len(e.raw) || string(b[:len(e.raw)]) != e.raw {
		return nil, 0
	}
	c.order.MoveToFront(el)
	c.hits++
	return e.msgs, len(e.raw)
}

// add caches the array raw (from '[' to the end of its last message) and
// its messages, replacing what its key named.
func (c *HistoryCache) add(raw string, msgs []Message) {
	if c == nil || len(raw) < keyBytes || len(raw) > c.maxBytes {
		return
	}
	key := maphash.String(c.seed, raw[:keyBytes])
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.remove(el)
	}
	c.byKey[key] = c.order.PushFront(&historyEntry{key: key, raw: raw, msgs: msgs})
	c.bytes += len(raw)
	for c.bytes > c.maxBytes {
		c.remove(c.order.Back())
	}
}

func (c *HistoryCache) remove(el *list.Element) {
	e := c.order.Remove(el).(*historyEntry)
	delete(c.byKey, e.key)
	c.bytes -= len(e.raw)
}

// Stats reports the lookups of arrays long enough to be cached, and how
// many found their history.
func (c *HistoryCache) Stats() (lookups, hits int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookups, c.hits
}
