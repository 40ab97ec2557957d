package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
)

// Tree is a sandbox's filesystem as the sync sees it: the local disk
// (tree.Local) or a remote sandbox's daemon. Paths are relative to root.
type Tree interface {
	Scan(ctx context.Context, root string, opt filetree.ScanOptions) (filetree.Result, error)
	// Export streams the named entries as tar (missing ones left out).
	Export(ctx context.Context, root string, paths []string) (io.ReadCloser, error)
	// Import applies a tar stream (entries, and deletions marked with
	// tree.OpRecord).
	Import(ctx context.Context, root string, r io.Reader) error
}

// WatchScanner scans one followed root (tree.Watch), reading again only
// what changed since its previous scan.
type WatchScanner interface {
	Scan(ctx context.Context, opt filetree.ScanOptions) (filetree.Result, error)
}

// Watched is tr whose scans of root (whole, as a mount without Include
// scans it) go through w.
func Watched(tr Tree, root string, w WatchScanner) Tree {
	return watchedTree{Tree: tr, root: root, w: w}
}

type watchedTree struct {
	Tree
	root string
	w    WatchScanner
}

func (t watchedTree) Scan(ctx context.Context, root string, opt filetree.ScanOptions) (filetree.Result, error) {
	if root != t.root || len(opt.Include) > 0 {
		return t.Tree.Scan(ctx, root, opt)
	}
	return t.w.Scan(ctx, opt)
}

// MetaDir is the store's (and the tree's) reserved directory: the
// manifest lives in it, and a tree's own MetaDir is never synced.
const MetaDir = ".agenta-runner"

// ManifestKey is where a mount's manifest lives in its store.
const ManifestKey = MetaDir + "/manifest.json"

// Manifest is what a mount's store holds: every entry of the tree, with
// the content hash of each file (its object is at the file's path).
type Manifest struct {
	Version int              `json:"version"`
	Time    int64            `json:"time"` // the scan's start, on the tree's clock
	Entries []filetree.Entry `json:"entries"`
}

// Mount is one synced tree: a directory in the sandbox and its store.
type Mount struct {
	Name    string // "workspace", "agent", "home": for errors and events
	Store   Store
	Root    string   // absolute path in the sandbox
	Include []string // see tree.ScanOptions
	Exclude []string
}

// ScanOptions are the options of a scan of m's tree that knows the
// entries of known.
func (m Mount) ScanOptions(known Manifest) filetree.ScanOptions {
	return filetree.ScanOptions{Include: m.Include, Exclude: append([]string{"/" + MetaDir}, m.Exclude...), Known: known.Entries, TrustBefore: known.Time}
}

// Stats counts what one restore or checkpoint did.
type Stats struct {
	Entries     int    // in the tree after it
	Hashed      int    // files read to hash them
	Transferred int    // files copied
	Bytes       int64  // bytes copied
	Deleted     int    // entries or objects removed
	Wrote       bool   // the manifest was written
	Dirs        int    // directories read by the scan
	Full        string // why a watched scan read the whole tree (tree.Result.Full)
}

// workers bounds concurrent object transfers of one sync.
const workers = 8

// inMemory is the size up to which a transferred file is buffered, so
// transfers of small files run in parallel.
const inMemory = 8 << 20

// ReadManifest reads a mount's manifest; a store without one is an empty
// tree.
func ReadManifest(ctx context.Context, s Store) (Manifest, error) {
	m, _, err := readManifest(ctx, s)
	return m, err
}

func readManifest(ctx context.Context, s Store) (Manifest, bool, error) {
	m, err := decodeManifest(ctx, s)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Manifest{Version: 1}, false, nil
	}
	return m, err == nil, err
}

func decodeManifest(ctx context.Context, s Store) (Manifest, error) {
	rc, err := s.Get(ctx, ManifestKey)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Manifest{}, err
	}
	if err != nil {
		return Manifest{}, StoreError(s.String(), "read manifest", err)
	}
	defer rc.Close()
	var m Manifest
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		return Manifest{}, StoreError(s.String(), "read manifest", fmt.Errorf("decode: %w", err))
	}
	if m.Version != 1 {
		return Manifest{}, StoreError(s.String(), "read manifest", fmt.Errorf("version %d is not supported", m.Version))
	}
	return m, nil
}

func writeManifest(ctx context.Context, s Store, m Manifest) error {
	b := appendManifest(make([]byte, 0, 64+150*len(m.Entries)), m)
	if err := s.Put(ctx, ManifestKey, bytes.NewReader(b), int64(len(b))); err != nil {
		return StoreError(s.String(), "write manifest", err)
	}
	return nil
}

// Restore makes the sandbox's tree at m.Root what the store holds,
// copying only what differs from what the tree already has, and returns
// the manifest the tree now matches (the base of the next Checkpoint).
// A store that never saw a checkpoint leaves the tree as it is: the first
// checkpoint adopts what is there.
func Restore(ctx context.Context, tr Tree, m Mount) (Manifest, Stats, error) {
	man, found, err := readManifest(ctx, m.Store)
	if err != nil || !found {
		return man, Stats{}, err
	}
	have, err := tr.Scan(ctx, m.Root, m.ScanOptions(man))
	if err != nil {
		return Manifest{}, Stats{}, fmt.Errorf("restore %s: %w", m.Name, err)
	}
	st := Stats{Entries: len(man.Entries), Hashed: have.Hashed}
	want := index(man.Entries)
	var deletes []string
	for _, e := range have.Entries {
		if _, ok := want[e.Path]; ok || underAny(e.Path, deletes) {
			continue
		}
		deletes = append(deletes, e.Path)
	}
	haveIdx := index(have.Entries)
	var puts []filetree.Entry
	for _, e := range man.Entries {
		if h, ok := haveIdx[e.Path]; ok && sameForRestore(h, e) {
			continue
		}
		puts = append(puts, e)
	}
	st.Deleted = len(deletes)
	if len(deletes) == 0 && len(puts) == 0 {
		return man, st, nil
	}
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	var got map[string]string // path → hash of what was copied
	var bytesCopied int64
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, bytesCopied, werr = writeRestoreTar(ctx, pw, m.Store, deletes, puts)
		pw.CloseWithError(werr)
	}()
	ierr := tr.Import(ctx, m.Root, pr)
	pr.CloseWithError(errors.New("import ended"))
	wg.Wait()
	if werr != nil {
		return Manifest{}, st, fmt.Errorf("restore %s: %w", m.Name, werr)
	}
	if ierr != nil {
		return Manifest{}, st, fmt.Errorf("restore %s into the sandbox: %w", m.Name, ierr)
	}
	for i, e := range man.Entries {
		if h, ok := got[e.Path]; ok {
			man.Entries[i].Hash = h // the object's content, whatever the manifest said
		}
	}
	st.Transferred, st.Bytes = len(got), bytesCopied
	return man, st, nil
}

func sameForRestore(have, want filetree.Entry) bool {
	if have.Kind != want.Kind || have.Mode != want.Mode {
		return false
	}
	switch want.Kind {
	case filetree.File:
		return have.Hash == want.Hash
	case filetree.Symlink:
		return have.Target == want.Target
	}
	return true
}

func index(es []filetree.Entry) map[string]filetree.Entry {
	m := make(map[string]filetree.Entry, len(es))
	for _, e := range es {
		m[e.Path] = e
	}
	return m
}

func underAny(p string, dirs []string) bool {
	for i := len(dirs) - 1; i >= 0; i-- { // sorted: the nearest parent is last
		if strings.HasPrefix(p, dirs[i]+"/") {
			return true
		}
	}
	return false
}

type fetched struct {
	data []byte
	err  error
}

// writeRestoreTar writes deletions, then entries (objects fetched ahead by
// workers, written in order), to w.
func writeRestoreTar(ctx context.Context, w io.Writer, s Store, deletes []string, puts []filetree.Entry) (map[string]string, int64, error) {
	tw := tar.NewWriter(w)
	for _, d := range deletes {
		if err := tw.WriteHeader(filetree.DeleteHeader(d)); err != nil {
			return nil, 0, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	futures := make([]chan fetched, len(puts))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, e := range puts {
		if e.Kind != filetree.File || e.Size > inMemory {
			continue
		}
		futures[i] = make(chan fetched, 1)
		wg.Add(1)
		go func(e filetree.Entry, out chan<- fetched) {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out <- fetched{err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			b, err := getAll(ctx, s, e.Path)
			out <- fetched{data: b, err: err}
		}(e, futures[i])
	}
	got := make(map[string]string)
	var total int64
	for i, e := range puts {
		hdr := filetree.Header(e)
		if e.Kind != filetree.File {
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, 0, err
			}
			continue
		}
		if futures[i] != nil {
			f := <-futures[i]
			if f.err != nil {
				return nil, 0, f.err
			}
			hdr.Size = int64(len(f.data))
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, 0, err
			}
			if _, err := tw.Write(f.data); err != nil {
				return nil, 0, err
			}
			got[e.Path] = filetree.HashBytes(f.data)
			total += hdr.Size
			continue
		}
		rc, err := s.Get(ctx, e.Path)
		if err != nil {
			return nil, 0, StoreError(s.String(), "get "+e.Path, err)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			rc.Close()
			return nil, 0, err
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(tw, h), rc)
		rc.Close()
		if err != nil {
			return nil, 0, StoreError(s.String(), "get "+e.Path, err)
		}
		if n != e.Size {
			return nil, 0, StoreError(s.String(), "get "+e.Path, fmt.Errorf("object has %d bytes, the manifest says %d", n, e.Size))
		}
		got[e.Path] = hex.EncodeToString(h.Sum(nil))
		total += n
	}
	return got, total, tw.Close()
}

func getAll(ctx context.Context, s Store, key string) ([]byte, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, StoreError(s.String(), "get "+key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, StoreError(s.String(), "get "+key, err)
	}
	return b, nil
}

// Checkpoint writes what changed in the sandbox's tree since prev (the
// manifest the tree last matched) to the store: changed files, deleted
// objects, then the new manifest. It returns that manifest.
func Checkpoint(ctx context.Context, tr Tree, m Mount, prev Manifest) (Manifest, Stats, error) {
	res, err := tr.Scan(ctx, m.Root, m.ScanOptions(prev))
	if err != nil {
		return Manifest{}, Stats{}, fmt.Errorf("checkpoint %s: %w", m.Name, err)
	}
	st := Stats{Hashed: res.Hashed, Dirs: res.Dirs, Full: res.Full}
	cur, old := sortedEntries(res.Entries), sortedEntries(prev.Entries)
	// Both lists are sorted by path: one pass finds the files that
	// changed and the earlier files that are no longer files.
	var changed, missing []string
	for i, j := 0, 0; i < len(old) || j < len(cur); {
		switch {
		case j == len(cur) || i < len(old) && old[i].Path < cur[j].Path:
			if old[i].Kind == filetree.File {
				missing = append(missing, old[i].Path)
			}
			i++
		case i == len(old) || cur[j].Path < old[i].Path:
			if cur[j].Kind == filetree.File {
				changed = append(changed, cur[j].Path)
			}
			j++
		default:
			o, e := old[i], cur[j]
			if e.Kind == filetree.File && (o.Kind != filetree.File || o.Hash != e.Hash || o.Size != e.Size) {
				changed = append(changed, e.Path)
			}
			if o.Kind == filetree.File && e.Kind != filetree.File {
				missing = append(missing, o.Path)
			}
			i, j = i+1, j+1
		}
	}
	// An object whose path is now a directory (or under what is now a
	// file) goes first: a store on a filesystem cannot hold both.
	var gone []string
	for _, p := range missing {
		if !conflicts(p, cur) {
			gone = append(gone, p)
			continue
		}
		if err := m.Store.Delete(ctx, p); err != nil {
			return Manifest{}, st, StoreError(m.Store.String(), "delete "+p, err)
		}
		st.Deleted++
	}
	uploaded := map[string]filetree.Entry{}
	if len(changed) > 0 {
		if uploaded, st.Bytes, err = upload(ctx, tr, m, changed); err != nil {
			return Manifest{}, st, err
		}
	}
	next := Manifest{Version: 1, Time: res.Time, Entries: make([]filetree.Entry, 0, len(cur))}
	k := 0
	for _, e := range cur {
		if k < len(changed) && changed[k] == e.Path {
			k++
			u, ok := uploaded[e.Path]
			if !ok {
				// Gone before it was read: its earlier object goes too.
				if o, found := lookup(old, e.Path); found && o.Kind == filetree.File && !conflicts(e.Path, cur) {
					gone = append(gone, e.Path)
				}
				continue
			}
			e = u
		}
		next.Entries = append(next.Entries, e)
	}
	st.Transferred, st.Entries = len(uploaded), len(next.Entries)
	if !manifestChanged(prev, next) {
		return prev, st, nil
	}
	// The manifest goes before the deletions: a checkpoint cut short never
	// leaves a manifest naming objects that are gone.
	if err := writeManifest(ctx, m.Store, next); err != nil {
		return Manifest{}, st, err
	}
	st.Wrote = true
	for _, p := range gone {
		if err := m.Store.Delete(ctx, p); err != nil {
			return Manifest{}, st, StoreError(m.Store.String(), "delete "+p, err)
		}
		st.Deleted++
	}
	return next, st, nil
}

// sortedEntries returns es sorted by path with one entry per path (a
// scan's and a manifest's already are; a sandbox's answer is not
// trusted to be).
func sortedEntries(es []filetree.Entry) []filetree.Entry {
	if slices.IsSortedFunc(es, func(a, b filetree.Entry) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return -1 // a duplicate is out of order
	}) {
		return es
	}
	es = slices.Clone(es)
	slices.SortStableFunc(es, func(a, b filetree.Entry) int { return strings.Compare(a.Path, b.Path) })
	return slices.CompactFunc(es, func(a, b filetree.Entry) bool { return a.Path == b.Path })
}

// lookup finds p in entries sorted by path.
func lookup(es []filetree.Entry, p string) (filetree.Entry, bool) {
	i, ok := slices.BinarySearchFunc(es, p, func(e filetree.Entry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return filetree.Entry{}, false
	}
	return es[i], true
}

// conflicts reports whether the file path p of an earlier tree clashes
// with the current one (sorted by path): p is now a directory or symlink,
// or one of its parents is no longer a directory.
func conflicts(p string, cur []filetree.Entry) bool {
	if e, ok := lookup(cur, p); ok && e.Kind != filetree.File {
		return true
	}
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if e, ok := lookup(cur, d); ok && e.Kind != filetree.Dir {
			return true
		}
	}
	return false
}

func manifestChanged(a, b Manifest) bool {
	return !slices.Equal(a.Entries, b.Entries)
}

// upload exports the changed files from the tree and puts each in the
// store, small ones by parallel workers. It returns the entries as
// uploaded (hash of what was sent).
func upload(ctx context.Context, tr Tree, m Mount, paths []string) (map[string]filetree.Entry, int64, error) {
	rc, err := tr.Export(ctx, m.Root, paths)
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %s: export from the sandbox: %w", m.Name, err)
	}
	defer rc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	sem := make(chan struct{}, workers)
	out := make(map[string]filetree.Entry, len(paths))
	asked := make(map[string]bool, len(paths))
	for _, p := range paths {
		asked[p] = true
	}
	var total int64
	trd := tar.NewReader(rc)
	for {
		hdr, err := trd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fail(fmt.Errorf("checkpoint %s: export from the sandbox: %w", m.Name, err))
			break
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		rel, err := filetree.Clean(hdr.Name)
		if err != nil {
			fail(fmt.Errorf("checkpoint %s: export from the sandbox: %w", m.Name, err))
			break
		}
		if !asked[rel] {
			continue // the sandbox's stream is not trusted to name other keys
		}
		delete(asked, rel)
		e := filetree.Entry{Path: rel, Kind: filetree.File, Mode: uint32(hdr.Mode & 0o7777), Size: hdr.Size, MTime: hdr.ModTime.UnixNano()}
		total += hdr.Size
		if hdr.Size > inMemory {
			h := sha256.New()
			if err := m.Store.Put(ctx, rel, io.TeeReader(trd, h), hdr.Size); err != nil {
				fail(StoreError(m.Store.String(), "put "+rel, err))
				break
			}
			e.Hash = hex.EncodeToString(h.Sum(nil))
			mu.Lock()
			out[rel] = e
			mu.Unlock()
			continue
		}
		b, err := io.ReadAll(trd)
		if err != nil {
			fail(fmt.Errorf("checkpoint %s: export from the sandbox: %w", m.Name, err))
			break
		}
		e.Hash = filetree.HashBytes(b)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := m.Store.Put(ctx, rel, bytes.NewReader(b), int64(len(b))); err != nil {
				fail(StoreError(m.Store.String(), "put "+rel, err))
				return
			}
			mu.Lock()
			out[rel] = e
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, 0, first
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return out, total, nil
}
