package filetree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Scan lists root. A missing root is an empty tree. Sockets, devices and
// pipes are skipped.
func Scan(root string, opt ScanOptions) (Result, error) {
	res := Result{Time: time.Now().UnixNano()}
	s := newScanner(root, opt, nil)
	if len(opt.Include) == 0 {
		top, err := s.top()
		if err != nil {
			return Result{}, err
		}
		res.Entries = top.flatten(nil)
	} else {
		starts, err := includeStarts(opt.Include)
		if err != nil {
			return Result{}, err
		}
		for _, start := range starts {
			if res.Entries, err = s.start(start, res.Entries); err != nil {
				return Result{}, err
			}
		}
		slices.SortFunc(res.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	}
	res.Hashed, res.Dirs = int(s.hashed.Load()), int(s.dirs.Load())
	return res, nil
}

// includeStarts cleans Include paths and drops those inside another.
func includeStarts(include []string) ([]string, error) {
	var starts []string
	for _, inc := range include {
		c, err := Clean(inc)
		if err != nil {
			return nil, err
		}
		starts = append(starts, c)
	}
	slices.Sort(starts)
	out := starts[:0]
	for _, s := range starts {
		if n := len(out); n > 0 && (s == out[n-1] || strings.HasPrefix(s, out[n-1]+"/")) {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// node is one directory read by a scan: its direct entries sorted by
// path, and the nodes of its subdirectories sorted the same way. A
// watched scan keeps the nodes and reads again only those that changed.
type node struct {
	rel      string // from the root, slash-separated; "" for the root
	dev, ino uint64
	ents     []Entry
	subs     []*node
	linked   bool // holds a file with more than one link
	gen      int  // the watched scan that last read it
}

// flatten appends the subtree's entries to out in path order: a
// subdirectory's contents sort as its name followed by "/".
func (n *node) flatten(out []Entry) []Entry {
	j := 0
	for i := range n.ents {
		for j < len(n.subs) && blockBefore(n.subs[j].rel, n.ents[i].Path) {
			out = n.subs[j].flatten(out)
			j++
		}
		out = append(out, n.ents[i])
	}
	for ; j < len(n.subs); j++ {
		out = n.subs[j].flatten(out)
	}
	return out
}

// blockBefore reports whether dir+"/" sorts before p, without building it.
func blockBefore(dir, p string) bool {
	if strings.HasPrefix(p, dir) {
		return len(p) > len(dir) && p[len(dir)] > '/'
	}
	return dir < p
}

// cmpBlocks orders the contents of directories a and b: as a+"/" and
// b+"/" sort ("a-b/…" before "a/…").
func cmpBlocks(a, b string) int {
	switch {
	case len(a) < len(b) && strings.HasPrefix(b, a):
		return strings.Compare("/", b[len(a):len(a)+1])
	case len(b) < len(a) && strings.HasPrefix(a, b):
		return strings.Compare(a[len(b):len(b)+1], "/")
	}
	return strings.Compare(a, b)
}

// count is the number of entries in the subtree.
func (n *node) count() int {
	c := len(n.ents)
	for _, s := range n.subs {
		c += s.count()
	}
	return c
}

// scanner reads directories, several at a time: a directory's
// subdirectories go to other goroutines while workers are free. Entries
// are stat-ed relative to their directory's descriptor.
type scanner struct {
	root    string
	exclude []string
	known   func(string) (Entry, bool)
	trust   int64
	sem     chan struct{}
	hashed  atomic.Int64
	dirs    atomic.Int64
	// before, when set, is called before a directory is read (a watch
	// starts following it there, so no change after the read is missed).
	before func(rel string) error
	gen    int // stamped on the nodes read
}

func newScanner(root string, opt ScanOptions, before func(string) error) *scanner {
	return &scanner{root: root, exclude: opt.Exclude, known: knownLookup(opt.Known), trust: opt.TrustBefore,
		sem: make(chan struct{}, scanWorkers()-1), before: before}
}

// scanWorkers bounds the goroutines reading one tree.
func scanWorkers() int {
	return min(max(runtime.GOMAXPROCS(0), 2), 4)
}

// knownLookup finds earlier entries by path: by binary search when they
// are sorted (a manifest always is), else through a map.
func knownLookup(known []Entry) func(string) (Entry, bool) {
	cmp := func(e Entry, p string) int { return strings.Compare(e.Path, p) }
	if slices.IsSortedFunc(known, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) }) {
		return func(p string) (Entry, bool) {
			i, ok := slices.BinarySearchFunc(known, p, cmp)
			if !ok {
				return Entry{}, false
			}
			return known[i], true
		}
	}
	m := make(map[string]Entry, len(known))
	for _, e := range known {
		m[e.Path] = e
	}
	return func(p string) (Entry, bool) {
		e, ok := m[p]
		return e, ok
	}
}

func (s *scanner) abs(rel string) string {
	if rel == "" {
		return s.root
	}
	return s.root + "/" + rel
}

// top reads the whole tree under the root. A root that is missing or not
// a directory is an empty tree.
func (s *scanner) top() (*node, error) {
	n := &node{}
	var st unix.Stat_t
	if err := unix.Lstat(s.root, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return n, nil
		}
		return nil, fmt.Errorf("scan %s: %w", s.root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return n, nil
	}
	if err := s.tree(n); err != nil {
		return nil, err
	}
	return n, nil
}

// start appends the entries of one Include path (a file or a subtree).
func (s *scanner) start(rel string, out []Entry) ([]Entry, error) {
	if Excluded(rel, s.exclude) {
		return out, nil
	}
	dir, name := path.Split(rel)
	fd, err := openDir(s.root, strings.TrimSuffix(dir, "/"), 0, nil)
	if err != nil {
		if gone(err) {
			return out, nil // missing, or behind a link: not part of the tree
		}
		return nil, fmt.Errorf("scan %s: %w", s.root, err)
	}
	defer unix.Close(fd)
	var linked bool
	e, n, ok, err := s.entry(fd, name, rel, &linked)
	if err != nil || !ok {
		return out, err
	}
	out = append(out, e)
	if n != nil {
		if err := s.tree(n); err != nil {
			return nil, err
		}
		out = n.flatten(out)
	}
	return out, nil
}

// tree reads n and its whole subtree.
func (s *scanner) tree(n *node) error {
	subs, err := s.dir(n)
	if err != nil {
		return err
	}
	return s.subtrees(subs)
}

// subtrees reads the subtrees of subs, some on other goroutines.
func (s *scanner) subtrees(subs []*node) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, sub := range subs {
		select {
		case s.sem <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.tree(sub)
				<-s.sem
				if err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}()
		default:
			if err := s.tree(sub); err != nil {
				wg.Wait()
				return err
			}
		}
	}
	wg.Wait()
	return first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// dir reads n's own entries (replacing what it held) and returns the
// nodes of its subdirectories, unread. A directory gone (or replaced by
// something else) since its parent was read is empty: its parent's
// change is seen by the next scan.
func (s *scanner) dir(n *node) ([]*node, error) {
	if s.before != nil {
		if err := s.before(n.rel); err != nil {
			return nil, err
		}
	}
	s.dirs.Add(1)
	n.ents, n.subs, n.linked, n.gen = nil, nil, false, s.gen
	// Beneath the root, never through a link: a directory the agent
	// swapped for one since its parent was read is gone, not followed.
	fd, err := openDir(s.root, n.rel, 0, nil)
	if err != nil {
		if gone(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("scan %s: %w", s.abs(n.rel), err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("scan %s: %w", s.abs(n.rel), err)
	}
	n.dev, n.ino = uint64(st.Dev), st.Ino // Dev is int32 on darwin
	names, err := readNames(fd)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", s.abs(n.rel), err)
	}
	prefix := ""
	if n.rel != "" {
		prefix = n.rel + "/"
	}
	var subs []*node
	for _, name := range names {
		rel := prefix + name
		if Excluded(rel, s.exclude) {
			continue
		}
		e, sub, ok, err := s.entry(fd, name, rel, &n.linked)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		n.ents = append(n.ents, e)
		if sub != nil {
			subs = append(subs, sub)
		}
	}
	slices.SortFunc(n.ents, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(subs, func(a, b *node) int { return cmpBlocks(a.rel, b.rel) })
	n.subs = subs
	return subs, nil
}

// gone reports whether err means a path vanished or is no longer what it
// was (a directory replaced by a file or symlink).
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// readNames lists a directory's names (without "." and "..").
func readNames(fd int) ([]string, error) {
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// entry stats name in the directory fd: ok is false when it is gone or
// of a kind the sync skips. A directory comes with its node, unread. A
// file with more than one link sets *linked.
func (s *scanner) entry(dirfd int, name, rel string, linked *bool) (e Entry, dir *node, ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Entry{}, nil, false, nil
		}
		return Entry{}, nil, false, fmt.Errorf("scan %s: %w", s.abs(rel), err)
	}
	e = Entry{Path: rel, Mode: modeBits(uint32(st.Mode))}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Kind, e.Size, e.MTime = File, st.Size, st.Mtim.Nano()
		if st.Nlink > 1 {
			*linked = true
		}
		if k, ok := s.known(rel); ok && k.Kind == File && k.Size == e.Size && k.MTime == e.MTime && k.Hash != "" && e.MTime < s.trust {
			e.Hash = k.Hash
			return e, nil, true, nil
		}
		h, n, err := hashAt(dirfd, name)
		if gone(err) {
			return Entry{}, nil, false, nil
		}
		if err != nil {
			return Entry{}, nil, false, fmt.Errorf("scan %s: %w", s.abs(rel), err)
		}
		e.Hash, e.Size = h, n
		s.hashed.Add(1)
	case unix.S_IFDIR:
		e.Kind = Dir
		return e, &node{rel: rel, dev: uint64(st.Dev), ino: st.Ino}, true, nil
	case unix.S_IFLNK:
		t, err := readlinkAt(dirfd, name)
		if err != nil {
			if gone(err) || errors.Is(err, unix.EINVAL) {
				return Entry{}, nil, false, nil
			}
			return Entry{}, nil, false, fmt.Errorf("scan %s: %w", s.abs(rel), err)
		}
		e.Kind, e.Target, e.Mode = Symlink, t, 0o777
	default:
		return Entry{}, nil, false, nil
	}
	return e, nil, true, nil
}

// modeBits are the permission and special bits of a stat mode, as
// Entry.Mode keeps them.
func modeBits(m uint32) uint32 {
	b := m & 0o777
	if m&unix.S_ISUID != 0 {
		b |= 0o4000
	}
	if m&unix.S_ISGID != 0 {
		b |= 0o2000
	}
	if m&unix.S_ISVTX != 0 {
		b |= 0o1000
	}
	return b
}

func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
	}
}

var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// hashAt hashes the regular file name in dirfd. It never follows a
// symlink, nor blocks on a pipe swapped in since the stat.
func hashAt(dirfd int, name string) (string, int64, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !info.Mode().IsRegular() {
		return "", 0, unix.ENOENT // replaced since the stat: the next scan sees what it is
	}
	h := sha256.New()
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	n, err := io.CopyBuffer(h, onlyReader{f}, *buf)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// onlyReader hides a file's WriterTo, so CopyBuffer uses the buffer.
type onlyReader struct{ io.Reader }
