package filetree

import (
	"time"
)

// SetAddWatch replaces inotify_add_watch.
func (n *Notifier) SetAddWatch(f func(fd int, path string, mask uint32) (int, error)) {
	n.addWatch = f
}

// Open reports whether the notifier holds its descriptor (and goroutine).
func (n *Notifier) Open() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.f != nil
}

// BeforeRead calls f before the watch reads each directory (after its
// kernel watch is in place).
func (w *Watch) BeforeRead(f func(rel string)) {
	w.beforeRead = f
}

// SetLastFull sets when the watch last read the whole tree.
func (w *Watch) SetLastFull(t time.Time) {
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	w.lastFull = t
}
