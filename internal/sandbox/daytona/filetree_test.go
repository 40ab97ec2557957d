package daytona_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/sandboxd/client"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
)

// scanTraffic counts the bytes of tree scans to and from the daemon:
// request bodies and answers.
type scanTraffic struct {
	next  http.RoundTripper
	bytes atomic.Int64
}

func (s *scanTraffic) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/v1/tree/scan") {
		return resp, err
	}
	s.bytes.Add(max(r.ContentLength, 0))
	resp.Body = &countedBody{ReadCloser: resp.Body, n: &s.bytes}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countedBody) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// remoteTree is a sandbox of the fake holding a workspace of files
// files, and two mounts of it: one checkpointed through the daemon's
// watch, one with a full scan each time.
type remoteTree struct {
	fake           *daytonatest.Server
	sb             sandbox.Sandbox
	traffic        *scanTraffic
	root, outside  string
	watched, full  workspace.Mount
	watchedTree    workspace.Tree
	manW, manF     workspace.Manifest
	newProviderCfg func(*daytona.Config)
}

func newRemoteTree(tb testing.TB, files int) *remoteTree {
	tb.Helper()
	fake := daytonatest.New(tb, daytonatest.Options{})
	traffic := &scanTraffic{next: http.DefaultTransport}
	mod := func(c *daytona.Config) { c.HTTPClient = &http.Client{Transport: traffic} }
	sb, err := newProvider(tb, fake, mod).Create(context.Background(), sandbox.Spec{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sb.Destroy(context.Background()) })
	r := &remoteTree{fake: fake, sb: sb, traffic: traffic, newProviderCfg: mod,
		root: filepath.Join(sb.Info().Workdir, "ws"), outside: filepath.Join(sb.Info().Workdir, "outside")}
	buf := make([]byte, 1000)
	for i := range files {
		p := filepath.Join(r.root, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%05d.txt", i))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				tb.Fatal(err)
			}
		}
		copy(buf, fmt.Sprint(i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	store := func() workspace.Store {
		st, err := fs.New(tb.TempDir())
		if err != nil {
			tb.Fatal(err)
		}
		return st
	}
	r.watched = workspace.Mount{Name: "watched", Store: store(), Root: r.root, Exclude: []string{"*.sqlite"}}
	r.full = workspace.Mount{Name: "full", Store: store(), Root: r.root, Exclude: []string{"*.sqlite"}}
	w, err := sb.(sandbox.TreeWatcher).WatchTree(r.root, r.watched.ScanOptions(workspace.Manifest{}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	r.watchedTree = workspace.Watched(sb.(sandbox.FileTree), r.root, w)
	return r
}

// checkpoint checkpoints the watched mount, returning its stats and the
// scan bytes it moved.
func (r *remoteTree) checkpoint(tb testing.TB) (workspace.Stats, int64) {
	tb.Helper()
	r.traffic.bytes.Store(0)
	man, st, err := workspace.Checkpoint(context.Background(), r.watchedTree, r.watched, r.manW)
	if err != nil {
		tb.Fatalf("watched checkpoint: %v", err)
	}
	r.manW = man
	return st, r.traffic.bytes.Load()
}

// checkpointFull checkpoints the other mount with a full scan.
func (r *remoteTree) checkpointFull(tb testing.TB) (workspace.Stats, int64) {
	tb.Helper()
	r.traffic.bytes.Store(0)
	man, st, err := workspace.Checkpoint(context.Background(), r.sb.(sandbox.FileTree), r.full, r.manF)
	if err != nil {
		tb.Fatalf("full checkpoint: %v", err)
	}
	r.manF = man
	return st, r.traffic.bytes.Load()
}

func (r *remoteTree) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(r.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// restartDaemon kills the sandbox's daemon and has another runner start
// a new one, which knows none of the old one's watches.
func (r *remoteTree) restartDaemon(t *testing.T) {
	t.Helper()
	id := r.sb.Info().ID
	killed := 0
	for _, p := range r.fake.Processes(id) {
		if strings.Contains(p.Args, " sandboxd ") {
			if err := syscall.Kill(p.HostPID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d daemons, want 1", killed)
	}
	if _, err := newProvider(t, r.fake, r.newProviderCfg).Open(t.Context(), id, sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointThroughWatch: checkpoints of a 10,000-file workspace in
// a sandbox of the fake (a real sandboxd) through the daemon's watch
// write the same manifest as checkpoints with a full scan, across
// creates, modifies, deletes, directory renames in and out and a daemon
// restart; an unchanged tree's scan moves a few hundred bytes, not the
// full scan's megabytes.
func TestCheckpointThroughWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("checkpoints a 10,000-file tree several times over the fake Daytona API: skipped under -short")
	}
	t.Parallel()
	r := newRemoteTree(t, 10_000)
	same := func(step string) workspace.Stats {
		t.Helper()
		// Names the step of a checkpoint that fails: one export ended
		// "unexpected EOF" under load, cause not found yet.
		t.Logf("checkpoint after: %s", step)
		st, _ := r.checkpoint(t)
		r.checkpointFull(t)
		if diff := cmp.Diff(r.manF.Entries, r.manW.Entries, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%s: the watched checkpoint's manifest differs from the full scan's (-full +watched):\n%s", step, diff)
		}
		return st
	}
	if st := same("first"); st.Full != filetree.FirstScan || st.Entries != 10_100 {
		t.Fatalf("first checkpoint: %+v, want a first scan of 10,100 entries", st)
	}

	st, watchedBytes := r.checkpoint(t)
	_, fullBytes := r.checkpointFull(t)
	t.Logf("unchanged 10,000-file tree: watched scan %d bytes, full scan %d bytes", watchedBytes, fullBytes)
	if st.Full != "" || st.Dirs != 0 || st.Wrote {
		t.Errorf("unchanged: %+v; want no directory read, nothing written", st)
	}
	if watchedBytes > 1024 || fullBytes < 1000*watchedBytes {
		t.Errorf("unchanged: the watched scan moved %d bytes, the full scan %d", watchedBytes, fullBytes)
	}

	if err := os.MkdirAll(filepath.Join(r.outside, "in/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.outside, "in/sub/x.txt"), []byte("moved in"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name string
		do   func()
	}{
		{"create", func() { r.write(t, "d001/new.txt", "new") }},
		{"modify", func() { r.write(t, "d002/f00200.txt", "changed") }},
		{"delete", func() { os.Remove(filepath.Join(r.root, "d003/f00300.txt")) }},
		{"excluded", func() { r.write(t, "d004/state.sqlite", "db") }},
		{"rename in", func() { os.Rename(filepath.Join(r.outside, "in"), filepath.Join(r.root, "in")) }},
		{"rename out", func() { os.Rename(filepath.Join(r.root, "d005"), filepath.Join(r.outside, "d005")) }},
		{"rename within", func() { os.Rename(filepath.Join(r.root, "d006"), filepath.Join(r.root, "in/d006")) }},
		{"write in a moved-in directory", func() { r.write(t, "in/sub/y.txt", "y") }},
		{"daemon restart", func() {
			r.restartDaemon(t)
			r.write(t, "d007/after-restart.txt", "after")
		}},
		{"after the restart", func() { os.RemoveAll(filepath.Join(r.root, "d008")) }},
	} {
		s.do()
		st := same(s.name)
		switch {
		case s.name == "daemon restart" && st.Full != client.TreeWatchRenewed:
			t.Errorf("%s: Full %q, want %q", s.name, st.Full, client.TreeWatchRenewed)
		case s.name != "daemon restart" && st.Full != "":
			t.Errorf("%s: Full %q, want a watched scan", s.name, st.Full)
		}
	}
}
