package filetree

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"sync"
	"syscall"
	"time"
)

// A Watch follows a tree on this machine's disk with inotify, so that a
// scan reads again only the directories whose entries changed since the
// last one and reuses what it read before for the rest. It never trusts
// an event it may have missed: when the kernel's queue overflowed, the
// watch limit was reached, a watched directory moved to another watch,
// or the root itself was moved or removed, the next scan reads the whole
// tree and says why (Result.Full).
//
// Ordering is what makes it exact: a directory is watched before it is
// read, and a scan takes the events queued up to its start (draining the
// inotify descriptor itself) before it reads anything. A change made
// after a directory was read is queued by the kernel before the call
// that made it returns, so the next scan sees it; a change made while a
// directory is read is read or queued, usually both.
//
// Directories created or moved in (from inside or outside the tree) are
// read whole and watched then; a directory at a path whose inode differs
// from the one read before is read whole too. Files with more than one
// link (which can change through a path in another directory) have their
// directory read at every scan.
//
// What inotify does not report, and a watch therefore does not see until
// the next full scan (FullEvery): writes through a shared mmap, changes
// made on another machine to a network filesystem, and changes below a
// mount point inside the tree made through another mount of it.
//
// inotify is Linux's (watch_linux.go); elsewhere a Watch follows nothing
// and each of its scans reads the whole tree, saying so in Result.Full.
type Watch struct {
	n       *Notifier
	root    string
	exclude []string

	// Guarded by n.mu.
	dirty  map[string]bool // directories whose entries changed
	fresh  map[string]bool // directories created or replaced: read whole
	full   string          // why the next scan must read everything
	broken string          // why watching stopped for good (scans are plain)
	wdOf   map[string]int32
	closed bool

	// Owned by Scan (scanMu).
	scanMu   sync.Mutex
	base     *node
	nodes    map[string]*node
	gen      int
	lastFull time.Time

	beforeRead func(rel string) // tests: races a change with the read
}

// FirstScan is Result.Full of a watch's first scan.
const FirstScan = "first scan"

// FullEvery bounds how long a watch trusts its events alone: a scan after
// that reads the whole tree (for what inotify never reports).
const FullEvery = 10 * time.Minute

// maxDirty is the number of changed directories past which a scan reads
// the whole tree rather than remember each.
const maxDirty = 1 << 16

// Notifier is one inotify instance shared by many watches (the kernel
// allows each user only a few instances, fs.inotify.max_user_instances).
// Its descriptor and the goroutine reading it live while it has watches.
// The zero value is ready to use.
type Notifier struct {
	mu      sync.Mutex
	f       *os.File // nil without watches
	rc      syscall.RawConn
	done    chan struct{}
	wds     map[int32]dirWatch
	watches int
	buf     []byte

	// Tests inject failures and tiny queues through these.
	addWatch func(fd int, path string, mask uint32) (int, error)
	init     func() (int, error)
}

type dirWatch struct {
	w   *Watch
	rel string
}

// ErrUnwatchable is returned by Watch for scans it cannot follow.
var ErrUnwatchable = errors.New("tree cannot be watched")

// Watch starts following root (what opt names: Include is not
// supported). Nothing is read until the first Scan.
func (n *Notifier) Watch(root string, opt ScanOptions) (*Watch, error) {
	if len(opt.Include) > 0 {
		return nil, fmt.Errorf("watch %s: %w: it names included paths", root, ErrUnwatchable)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	broken, err := n.openLocked(root)
	if err != nil {
		return nil, err
	}
	n.watches++
	return &Watch{n: n, root: root, exclude: slices.Clone(opt.Exclude), dirty: map[string]bool{}, fresh: map[string]bool{}, wdOf: map[string]int32{}, broken: broken}, nil
}

func (n *Notifier) allFullLocked(why string) {
	seen := map[*Watch]bool{}
	for _, dw := range n.wds {
		if !seen[dw.w] {
			seen[dw.w] = true
			dw.w.markFullLocked(why)
		}
	}
}

func parent(rel string) string {
	if d := path.Dir(rel); d != "." {
		return d
	}
	return ""
}

// gone is a watched directory removed, moved or unmounted.
func (w *Watch) gone(rel string) {
	if rel == "" {
		w.markFullLocked("the watched root was moved or removed")
		return
	}
	w.fresh[rel] = true
	w.mark(parent(rel))
}

func (w *Watch) mark(rel string) {
	if len(w.dirty) >= maxDirty {
		w.markFullLocked(fmt.Sprintf("more than %d directories changed", maxDirty))
		return
	}
	w.dirty[rel] = true
}

func (w *Watch) markFullLocked(why string) {
	if w.full == "" {
		w.full = why
	}
}

// watchDir starts following rel (before it is read). A directory that is
// gone is not an error: its parent's event covers it.
func (w *Watch) watchDir(rel string) error {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil || w.closed {
		return errWatchClosed
	}
	abs := w.root
	if rel != "" {
		abs += "/" + rel
	}
	id, err := n.addLocked(abs)
	if err != nil {
		if gone(err) {
			if rel == "" {
				w.markFullLocked("the watched root does not exist")
			}
			return nil
		}
		return err
	}
	if old, ok := n.wds[id]; ok {
		switch {
		case old.w != w:
			// A directory moved from one watched tree to another: the
			// tree it left may still name it; it reads everything.
			old.w.markFullLocked("one of its directories moved into another watched tree")
			if old.w.wdOf[old.rel] == id {
				delete(old.w.wdOf, old.rel)
			}
		case old.rel != rel && w.wdOf[old.rel] == id:
			delete(w.wdOf, old.rel) // moved within the tree
		}
	}
	n.wds[id] = dirWatch{w: w, rel: rel}
	w.wdOf[rel] = id
	return nil
}

var (
	errWatchLimit  = errors.New("the inotify watch limit is reached (fs.inotify.max_user_watches)")
	errWatchClosed = errors.New("watch closed")
)

// Scan lists the watched root as Scan would, reading only the directories
// changed since the previous Scan. Known and TrustBefore come from opt;
// what is excluded is the watch's.
func (w *Watch) Scan(ctx context.Context, opt ScanOptions) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	start := time.Now()
	n := w.n
	n.mu.Lock()
	if w.closed {
		n.mu.Unlock()
		return Result{}, errWatchClosed
	}
	// Every event queued before this scan reads anything is taken now.
	n.takeLocked()
	dirty, fresh, full, broken := w.dirty, w.fresh, w.full, w.broken
	w.dirty, w.fresh, w.full = map[string]bool{}, map[string]bool{}, ""
	n.mu.Unlock()

	opt.Include, opt.Exclude = nil, w.exclude
	if broken != "" {
		res, err := Scan(w.root, opt)
		res.Full = broken
		return res, err
	}
	switch {
	case full != "":
	case w.base == nil:
		full = FirstScan
	case start.Sub(w.lastFull) >= FullEvery:
		full = "periodic full scan, for changes inotify does not report"
	}
	w.gen++
	before := w.watchDir
	if w.beforeRead != nil {
		before = func(rel string) error {
			err := w.watchDir(rel)
			w.beforeRead(rel)
			return err
		}
	}
	s := newScanner(w.root, opt, before)
	s.gen = w.gen
	var err error
	if full != "" {
		err = w.scanAll(s)
	} else {
		err = w.scanDirty(s, dirty, fresh)
	}
	if errors.Is(err, errWatchLimit) {
		w.stop(err.Error())
		res, err := Scan(w.root, opt)
		res.Full = errWatchLimit.Error()
		return res, err
	}
	if err != nil {
		n.mu.Lock()
		w.markFullLocked("the previous scan failed")
		n.mu.Unlock()
		return Result{}, err
	}
	if full != "" {
		w.lastFull = start
	}
	res := Result{Time: start.UnixNano(), Hashed: int(s.hashed.Load()), Dirs: int(s.dirs.Load()), Full: full}
	res.Entries = w.base.flatten(make([]Entry, 0, w.base.count()))
	return res, nil
}

// scanAll reads the whole tree, watching every directory.
func (w *Watch) scanAll(s *scanner) error {
	top, err := s.top()
	if err != nil {
		return err
	}
	if top.ino == 0 {
		w.n.mu.Lock()
		w.markFullLocked("the watched root does not exist")
		w.n.mu.Unlock()
	}
	w.base, w.nodes = top, map[string]*node{}
	w.index(top)
	w.gc()
	return nil
}

// scanDirty reads again the directories named by events (parents first);
// a subdirectory keeps what was read before unless it is new, replaced
// (another inode) or was created or moved in.
func (w *Watch) scanDirty(s *scanner, dirty, fresh map[string]bool) error {
	for rel, nd := range w.nodes {
		if nd.linked {
			dirty[rel] = true
		}
	}
	changed := false
	for _, rel := range slices.Sorted(maps.Keys(dirty)) {
		nd := w.nodes[rel]
		if nd == nil || nd.gen == s.gen {
			continue // gone, or read whole in this scan
		}
		old := nd.subs
		subs, err := s.dir(nd)
		if err != nil {
			return err
		}
		byRel := make(map[string]*node, len(old))
		for _, o := range old {
			byRel[o.rel] = o
		}
		var unread []*node
		for i, sub := range subs {
			o, ok := byRel[sub.rel]
			if ok && !fresh[sub.rel] && o.dev == sub.dev && o.ino == sub.ino {
				subs[i] = o
				delete(byRel, sub.rel)
				continue
			}
			unread = append(unread, sub)
		}
		for _, o := range byRel {
			w.unindex(o)
			changed = true
		}
		if len(unread) > 0 {
			if err := s.subtrees(unread); err != nil {
				return err
			}
			for _, sub := range unread {
				w.index(sub)
			}
			changed = true
		}
	}
	if changed {
		w.gc()
	}
	return nil
}

func (w *Watch) index(nd *node) {
	w.nodes[nd.rel] = nd
	for _, s := range nd.subs {
		w.index(s)
	}
}

func (w *Watch) unindex(nd *node) {
	if w.nodes[nd.rel] == nd {
		delete(w.nodes, nd.rel)
	}
	for _, s := range nd.subs {
		w.unindex(s)
	}
}

// gc stops the kernel watches of directories no longer in the tree.
func (w *Watch) gc() {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for rel, wd := range w.wdOf {
		if w.nodes[rel] != nil {
			continue
		}
		delete(w.wdOf, rel)
		if dw, ok := n.wds[wd]; ok && dw.w == w && dw.rel == rel {
			n.rmLocked(wd)
		}
	}
}

// stop ends watching for good: scans are plain from now on.
func (w *Watch) stop(why string) {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	w.broken = why
	for _, wd := range w.wdOf {
		if dw, ok := n.wds[wd]; ok && dw.w == w {
			n.rmLocked(wd)
		}
	}
	w.wdOf = map[string]int32{}
	w.base, w.nodes = nil, nil
}

// Close stops following the tree. The notifier's descriptor and goroutine
// end with its last watch.
func (w *Watch) Close() error {
	n := w.n
	n.mu.Lock()
	if w.closed {
		n.mu.Unlock()
		return nil
	}
	w.closed = true
	for _, wd := range w.wdOf {
		if dw, ok := n.wds[wd]; ok && dw.w == w {
			n.rmLocked(wd)
		}
	}
	w.wdOf = nil
	n.watches--
	var f *os.File
	var done chan struct{}
	if n.watches == 0 && n.f != nil {
		f, done = n.f, n.done
		n.f, n.rc, n.wds = nil, nil, nil
	}
	n.mu.Unlock()
	if f != nil {
		f.Close()
		<-done
	}
	return nil
}
