package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// swappableDaemon serves whichever daemon is current, as a sandbox's
// fixed address does across daemon restarts; it counts the bytes of scan
// answers as they are written, before the client can have them (counted
// once the handler returned, a test reading the count right after its
// scan could miss them).
type swappableDaemon struct {
	h         atomic.Pointer[http.Handler]
	scanBytes atomic.Int64
}

func (d *swappableDaemon) set(t *testing.T, h http.Handler) { d.h.Store(&h) }

func (d *swappableDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/tree/scan" {
		w = &countingWriter{ResponseWriter: w, n: &d.scanBytes}
	}
	(*d.h.Load()).ServeHTTP(w, r)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return c.ResponseWriter.Write(b)
}

func newDaemon(t *testing.T) *sandboxd.Server {
	t.Helper()
	srv, err := sandboxd.NewServer(sandboxd.Config{Token: testToken, Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func newSwappable(t *testing.T) (*swappableDaemon, *Client) {
	t.Helper()
	d := &swappableDaemon{}
	d.set(t, newDaemon(t).Handler())
	hs := httptest.NewServer(d)
	t.Cleanup(hs.Close)
	return d, newTestClient(hs, nil)
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sameAsFullScan scans through w and plainly, and fails on a difference.
func sameAsFullScan(t *testing.T, c *Client, w *WatchedTree, root string, exclude []string, step string) filetree.Result {
	t.Helper()
	ctx := context.Background()
	got, err := w.Scan(ctx, filetree.ScanOptions{})
	if err != nil {
		t.Fatalf("%s: watched scan: %v", step, err)
	}
	want, err := c.TreeScan(ctx, root, filetree.ScanOptions{Exclude: exclude})
	if err != nil {
		t.Fatalf("%s: full scan: %v", step, err)
	}
	if diff := cmp.Diff(want.Entries, got.Entries, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("%s: watched scan differs from a full scan (-full +watched):\n%s", step, diff)
	}
	return got
}

// TestTreeWatchMatchesFullScan follows a tree through creates, modifies,
// deletes and directory renames within, into and out of it, and a daemon
// restart: every watched scan equals a full scan, and an unchanged
// tree's answer is small.
func TestTreeWatchMatchesFullScan(t *testing.T) {
	d, c := newSwappable(t)
	root, outside := t.TempDir(), t.TempDir()
	exclude := []string{"/.agenta-runner", "*.sqlite"}
	for i := range 300 {
		writeFile(t, filepath.Join(root, fmt.Sprintf("d%d/f%03d.txt", i%10, i)), strings.Repeat("x", i))
	}
	writeFile(t, filepath.Join(root, ".agenta-runner/manifest.json"), "{}")
	w, err := c.WatchTree(root, filetree.ScanOptions{Exclude: exclude})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := sameAsFullScan(t, c, w, root, exclude, "first scan")
	if first.Full != filetree.FirstScan {
		t.Errorf("first scan: Full %q, want %q", first.Full, filetree.FirstScan)
	}

	res := sameAsFullScan(t, c, w, root, exclude, "unchanged")
	if res.Full != "" || res.Dirs != 0 {
		t.Errorf("unchanged: Full %q, %d dirs read; want none", res.Full, res.Dirs)
	}
	d.scanBytes.Store(0)
	if _, err := w.Scan(context.Background(), filetree.ScanOptions{}); err != nil {
		t.Fatal(err)
	}
	watched := d.scanBytes.Swap(0)
	if _, err := c.TreeScan(context.Background(), root, filetree.ScanOptions{Exclude: exclude}); err != nil {
		t.Fatal(err)
	}
	full := d.scanBytes.Load()
	t.Logf("unchanged tree of %d entries: watched answer %d bytes, full scan %d", len(res.Entries), watched, full)
	if watched > 512 || full < 10*watched {
		t.Errorf("unchanged tree: the watched answer is %d bytes, the full scan's %d", watched, full)
	}

	steps := []struct {
		name string
		do   func()
	}{
		{"create", func() { writeFile(t, filepath.Join(root, "d1/new.txt"), "new") }},
		{"modify", func() { writeFile(t, filepath.Join(root, "d2/f002.txt"), "changed") }},
		{"delete", func() { os.Remove(filepath.Join(root, "d3/f003.txt")) }},
		{"excluded", func() { writeFile(t, filepath.Join(root, "d4/x.sqlite"), "db") }},
		{"chmod", func() { os.Chmod(filepath.Join(root, "d5/f005.txt"), 0o600) }},
		{"symlink", func() { os.Symlink("d1/new.txt", filepath.Join(root, "link")) }},
		{"new directory", func() { writeFile(t, filepath.Join(root, "n/m/deep.txt"), "deep") }},
		{"rename within", func() { os.Rename(filepath.Join(root, "d6"), filepath.Join(root, "n/d6")) }},
		{"rename in", func() {
			writeFile(t, filepath.Join(outside, "in/a/b.txt"), "from outside")
			os.Rename(filepath.Join(outside, "in"), filepath.Join(root, "in"))
		}},
		{"rename out", func() { os.Rename(filepath.Join(root, "d7"), filepath.Join(outside, "d7")) }},
		{"write in a moved-in directory", func() { writeFile(t, filepath.Join(root, "in/a/c.txt"), "c") }},
		{"replace a directory by a file", func() {
			os.RemoveAll(filepath.Join(root, "d8"))
			writeFile(t, filepath.Join(root, "d8"), "now a file")
		}},
		{"daemon restart", func() { d.set(t, newDaemon(t).Handler()) }},
		{"after the restart", func() { writeFile(t, filepath.Join(root, "d9/after.txt"), "after") }},
		{"delete everything", func() {
			ents, _ := os.ReadDir(root)
			for _, e := range ents {
				os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}},
	}
	for _, s := range steps {
		s.do()
		res := sameAsFullScan(t, c, w, root, exclude, s.name)
		if s.name == "daemon restart" && res.Full != TreeWatchRenewed {
			t.Errorf("after a daemon restart: Full %q, want %q", res.Full, TreeWatchRenewed)
		}
	}
}

// oldDaemon answers as a daemon from before watches: no watch route, and
// a scan that ignores the watch fields.
func oldDaemon(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/tree/watch") {
			w.Header().Set(sandboxd.VersionHeader, "old")
			http.NotFound(w, r)
			return
		}
		if r.URL.Path == "/v1/tree/scan" {
			var req sandboxd.TreeScanRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			req.Watch, req.Generation = "", 0
			b, _ := json.Marshal(req)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	})
}

// TestTreeWatchOldDaemon: a daemon without the watch route gets full
// scans, before and after a watch existed.
func TestTreeWatchOldDaemon(t *testing.T) {
	d, c := newSwappable(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a/b.txt"), "b")
	srv := newDaemon(t)
	d.set(t, oldDaemon(srv.Handler()))
	w, _ := c.WatchTree(root, filetree.ScanOptions{})
	defer w.Close()
	if res := sameAsFullScan(t, c, w, root, nil, "old daemon"); res.Full != NoTreeWatch {
		t.Errorf("old daemon: Full %q, want %q", res.Full, NoTreeWatch)
	}

	// A watch on a new daemon, then an old one takes its place: it
	// answers the watched scan in full, and later scans stay plain.
	d.set(t, newDaemon(t).Handler())
	w2, _ := c.WatchTree(root, filetree.ScanOptions{})
	defer w2.Close()
	sameAsFullScan(t, c, w2, root, nil, "new daemon")
	d.set(t, oldDaemon(srv.Handler()))
	writeFile(t, filepath.Join(root, "a/c.txt"), "c")
	for _, step := range []string{"replaced by an old daemon", "again"} {
		if res := sameAsFullScan(t, c, w2, root, nil, step); res.Full != NoTreeWatch {
			t.Errorf("%s: Full %q, want %q", step, res.Full, NoTreeWatch)
		}
	}
}

// TestTreeWatchRoutes: the routes' refusals, a stale generation, and
// closing.
func TestTreeWatchRoutes(t *testing.T) {
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	ctx := context.Background()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "f"), "f")

	if _, err := c.treeWatch(ctx, "relative", filetree.ScanOptions{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("relative root: %v, want invalid", err)
	}
	if _, err := c.treeWatch(ctx, root, filetree.ScanOptions{Include: []string{"f"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("include: %v, want invalid", err)
	}
	_, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: root, Watch: "nope", Generation: 3})
	if !isNoRoute(err) || !strings.Contains(err.Error(), "watch again") {
		t.Errorf("unknown watch: %v, want the daemon's 404 saying to watch again", err)
	}

	id, err := c.treeWatch(ctx, root, filetree.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: "/elsewhere", Watch: id}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("another root: %v, want invalid", err)
	}
	r1, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: root, Watch: id})
	if err != nil || r1.Generation != 1 || r1.Base != 0 || len(r1.Entries) != 1 {
		t.Fatalf("first scan: %+v, %v; want generation 1, whole", r1, err)
	}
	// The answer to generation 1 was lost: the runner asks again from 1
	// after the daemon moved to 2, and gets the whole tree.
	if _, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: root, Watch: id, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	r3, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: root, Watch: id, Generation: 1})
	if err != nil || r3.Generation != 3 || r3.Base != 0 || len(r3.Entries) != 1 {
		t.Fatalf("stale generation: %+v, %v; want generation 3, whole", r3, err)
	}
	r4, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: root, Watch: id, Generation: 3})
	if err != nil || r4.Base != 3 || len(r4.Entries) != 0 || len(r4.Removed) != 0 {
		t.Fatalf("unchanged: %+v, %v; want an empty delta on 3", r4, err)
	}

	for range sandboxd.MaxTreeWatches - 1 {
		if _, err := c.treeWatch(ctx, root, filetree.ScanOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.treeWatch(ctx, root, filetree.ScanOptions{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("watch %d: %v, want conflict", sandboxd.MaxTreeWatches+1, err)
	}
	// Refused a watch, a WatchedTree still answers, in full.
	w, _ := c.WatchTree(root, filetree.ScanOptions{})
	if res := sameAsFullScan(t, c, w, root, nil, "refused"); !strings.Contains(res.Full, "would not watch") {
		t.Errorf("refused watch: Full %q", res.Full)
	}

	for range 2 { // idempotent
		resp, err := c.do(ctx, http.MethodDelete, "/v1/tree/watch/"+id, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if _, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: root, Watch: id, Generation: 4}); !isNoRoute(err) {
		t.Errorf("closed watch: %v, want 404", err)
	}
	if err := w.Close(); err != nil {
		t.Error(err)
	}
	if _, err := w.Scan(ctx, filetree.ScanOptions{}); err == nil {
		t.Error("a closed WatchedTree scanned")
	}
}
