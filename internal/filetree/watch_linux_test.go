package filetree_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/filetree"
)

var watchExclude = []string{".credentials.json", "/.agenta-runner"}

// watched is a watch on a tree and the checks that its scans list what a
// full scan does.
type watched struct {
	t    *testing.T
	root string
	w    *filetree.Watch
	last filetree.Result
}

func watch(t *testing.T, n *filetree.Notifier, root string) *watched {
	t.Helper()
	w, err := n.Watch(root, filetree.ScanOptions{Exclude: watchExclude})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &watched{t: t, root: root, w: w}
}

// check scans through the watch and compares with a full scan; full is
// the reason expected for reading everything ("" for an incremental
// scan, "*" for any).
func (ww *watched) check(step, full string) filetree.Result {
	ww.t.Helper()
	got, err := ww.w.Scan(context.Background(), filetree.ScanOptions{Known: ww.last.Entries, TrustBefore: ww.last.Time})
	if err != nil {
		ww.t.Fatalf("%s: watched scan: %v", step, err)
	}
	want, err := filetree.Scan(ww.root, filetree.ScanOptions{Exclude: watchExclude})
	if err != nil {
		ww.t.Fatal(err)
	}
	if diff := cmp.Diff(want.Entries, got.Entries, cmpopts.EquateEmpty()); diff != "" {
		ww.t.Errorf("%s: the watched scan differs from a full one (-full +watched):\n%s", step, diff)
	}
	switch {
	case full == "*":
	case full == "" && got.Full != "":
		ww.t.Errorf("%s: read the whole tree (%s), want only what changed", step, got.Full)
	case full != "" && !strings.Contains(got.Full, full):
		ww.t.Errorf("%s: full = %q, want it to say %q", step, got.Full, full)
	}
	ww.last = got
	return got
}

func find(es []filetree.Entry, p string) filetree.Entry {
	for _, e := range es {
		if e.Path == p {
			return e
		}
	}
	return filetree.Entry{}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func base(t *testing.T) string {
	root := t.TempDir()
	for i := range 4 {
		for j := range 3 {
			write(t, root, fmt.Sprintf("d%d/e%d/f%d", i, j, j), fmt.Sprintf("file %d %d", i, j))
		}
		write(t, root, fmt.Sprintf("d%d/top", i), "top")
	}
	write(t, root, "readme", "hello")
	return root
}

func TestWatchMatchesFullScan(t *testing.T) {
	var n filetree.Notifier
	root := base(t)
	outside := t.TempDir()
	ww := watch(t, &n, root)
	first := ww.check("first", "first scan")
	if first.Dirs < 17 {
		t.Fatalf("first scan read %d directories, want all", first.Dirs)
	}
	unchanged := ww.check("unchanged", "")
	if unchanged.Dirs != 0 || unchanged.Hashed != 0 {
		t.Errorf("unchanged: read %d directories, hashed %d files; want none", unchanged.Dirs, unchanged.Hashed)
	}

	steps := []struct {
		name string
		do   func()
	}{
		{"create a file", func() { write(t, root, "d0/e0/new", "new") }},
		{"modify a file, same size", func() { write(t, root, "d1/e1/f1", "FILE 1 1") }},
		{"append to a file kept open", func() {
			f, err := os.OpenFile(filepath.Join(root, "readme"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.WriteString(" world")
			must(t, err)
			ww.check("append (still open)", "")
			must(t, f.Close())
		}},
		{"delete a file", func() { must(t, os.Remove(filepath.Join(root, "d2/top"))) }},
		{"chmod a file", func() { must(t, os.Chmod(filepath.Join(root, "d0/top"), 0o600)) }},
		{"chmod a directory", func() { must(t, os.Chmod(filepath.Join(root, "d3/e2"), 0o700)) }},
		{"symlink, then retarget it", func() {
			must(t, os.Symlink("d0", filepath.Join(root, "ln")))
			ww.check("symlink", "")
			must(t, os.Remove(filepath.Join(root, "ln")))
			must(t, os.Symlink("d1", filepath.Join(root, "ln")))
		}},
		{"create a deep directory tree with files", func() {
			write(t, root, "d0/n1/n2/n3/deep", "deep")
			write(t, root, "d0/n1/side", "side")
		}},
		{"write into the new directories", func() { write(t, root, "d0/n1/n2/n3/deep2", "deeper") }},
		{"rename a file", func() { must(t, os.Rename(filepath.Join(root, "d1/top"), filepath.Join(root, "d1/e0/moved"))) }},
		{"rename a directory within the tree", func() { must(t, os.Rename(filepath.Join(root, "d0/n1"), filepath.Join(root, "d2/renamed"))) }},
		{"write into the renamed directory", func() { write(t, root, "d2/renamed/n2/n3/deep", "changed after the move") }},
		{"rename a directory from outside into the tree", func() {
			write(t, outside, "incoming/sub/f", "from outside")
			must(t, os.Rename(filepath.Join(outside, "incoming"), filepath.Join(root, "d3/incoming")))
		}},
		{"write into the directory moved in", func() { write(t, root, "d3/incoming/sub/g", "after") }},
		{"rename a directory out of the tree, then change it there", func() {
			must(t, os.Rename(filepath.Join(root, "d3/incoming"), filepath.Join(outside, "left")))
			write(t, outside, "left/sub/h", "outside now")
		}},
		{"delete a watched directory", func() { must(t, os.RemoveAll(filepath.Join(root, "d2/renamed"))) }},
		{"replace a directory by another of the same name", func() {
			must(t, os.RemoveAll(filepath.Join(root, "d1/e2")))
			write(t, root, "d1/e2/other", "a new directory")
		}},
		{"swap two directories", func() {
			must(t, os.Rename(filepath.Join(root, "d1/e0"), filepath.Join(root, "tmp")))
			must(t, os.Rename(filepath.Join(root, "d1/e1"), filepath.Join(root, "d1/e0")))
			must(t, os.Rename(filepath.Join(root, "tmp"), filepath.Join(root, "d1/e1")))
		}},
		{"a directory replaced by a file", func() {
			must(t, os.RemoveAll(filepath.Join(root, "d3/e0")))
			write(t, root, "d3/e0", "a file now")
		}},
		{"an excluded name", func() { write(t, root, "d0/.credentials.json", "secret") }},
		{"a file changed through a hard link outside the tree", func() {
			// inotify reports no link made elsewhere: the link counts once
			// its directory is read again (here: another change in it).
			must(t, os.Link(filepath.Join(root, "d3/e1/f1"), filepath.Join(outside, "hard")))
			write(t, root, "d3/e1/other", "so that d3/e1 is read")
			ww.check("hard link made", "")
			must(t, os.WriteFile(filepath.Join(outside, "hard"), []byte("changed through the other link"), 0o644))
		}},
		{"many changes at once", func() {
			for i := range 50 {
				write(t, root, fmt.Sprintf("bulk/%d/f", i), "x")
			}
			must(t, os.RemoveAll(filepath.Join(root, "d3")))
		}},
	}
	for _, s := range steps {
		s.do()
		ww.check(s.name, "")
	}
}

func TestWatchRaceWithRead(t *testing.T) {
	var n filetree.Notifier
	root := base(t)
	ww := watch(t, &n, root)
	ww.check("first", "first scan")
	write(t, root, "d1/e0/f0", "touch d1/e0 so it is read")
	// While the scan reads d1/e0, change what it has read already (d0, a
	// sibling read before it) and what it is about to read.
	raced := false
	ww.w.BeforeRead(func(rel string) {
		if rel != "d1/e0" || raced {
			return
		}
		raced = true
		write(t, root, "d1/e0/f0", "changed just before the read")
		write(t, root, "d0/e0/f0", "changed during the scan, in a directory not read")
	})
	got, err := ww.w.Scan(context.Background(), filetree.ScanOptions{Known: ww.last.Entries, TrustBefore: ww.last.Time})
	must(t, err)
	ww.w.BeforeRead(nil)
	if !raced {
		t.Fatal("the scan never read d1/e0")
	}
	if e := find(got.Entries, "d1/e0/f0"); e.Hash != filetree.HashBytes([]byte("changed just before the read")) {
		t.Errorf("the scan missed a change made before it read the directory: %+v", e)
	}
	ww.last = got
	// Whatever that scan saw of d0, the next one has it.
	ww.check("after the race", "")
}

func TestWatchOverflowReadsEverything(t *testing.T) {
	var n filetree.Notifier
	root := base(t)
	ww := watch(t, &n, root)
	ww.check("first", "first scan")
	write(t, root, "d2/e2/f2", "lost with the queue")
	n.InjectOverflow()
	ww.check("after an overflow", "overflowed")
	write(t, root, "d2/e2/f2", "seen again")
	ww.check("watching again", "")
}

func TestWatchLimitFallsBack(t *testing.T) {
	var n filetree.Notifier
	added := 0
	n.SetAddWatch(func(fd int, path string, mask uint32) (int, error) {
		if added++; added > 5 {
			return -1, unix.ENOSPC
		}
		return unix.InotifyAddWatch(fd, path, mask)
	})
	root := base(t)
	ww := watch(t, &n, root)
	ww.check("first", "watch limit")
	write(t, root, "d0/e0/f0", "after the limit")
	ww.check("plain from now on", "watch limit")
}

func TestWatchRootRemoved(t *testing.T) {
	var n filetree.Notifier
	root := filepath.Join(base(t), "ws")
	ww := watch(t, &n, root)
	ww.check("missing root", "first scan")
	ww.check("still missing", "does not exist")
	write(t, root, "a/b", "the root appears")
	ww.check("root created", "does not exist")
	ww.check("watched", "")
	must(t, os.RemoveAll(root))
	write(t, root, "c", "recreated")
	ww.check("root replaced", "root was moved or removed")
	write(t, root, "d", "more")
	ww.check("watched again", "")
}

func TestWatchTwoTrees(t *testing.T) {
	var n filetree.Notifier
	parent := t.TempDir()
	a, b := filepath.Join(parent, "work"), filepath.Join(parent, "work-agent")
	write(t, a, "x/y/f", "in a")
	write(t, b, "z/f", "in b")
	wa, wb := watch(t, &n, a), watch(t, &n, b)
	wa.check("a first", "first scan")
	wb.check("b first", "first scan")
	must(t, os.Rename(filepath.Join(b, "z"), filepath.Join(a, "z")))
	wa.check("a after the move in", "")
	wb.check("b after the move out", "another watched tree")
	write(t, a, "z/g", "written after the move")
	wa.check("a, the moved directory", "")
	wb.check("b", "")
}

func TestWatchPeriodicFullScan(t *testing.T) {
	var n filetree.Notifier
	root := base(t)
	ww := watch(t, &n, root)
	ww.check("first", "first scan")
	ww.w.SetLastFull(time.Now().Add(-filetree.FullEvery))
	ww.check("stale", "periodic")
	ww.check("fresh again", "")
}

func TestWatchCloseEndsTheReader(t *testing.T) {
	var n filetree.Notifier
	a := watch(t, &n, base(t))
	b := watch(t, &n, base(t))
	a.check("a", "first scan")
	b.check("b", "first scan")
	must(t, a.w.Close())
	if !n.Open() {
		t.Fatal("the notifier closed with a watch left")
	}
	b.check("b after a closed", "")
	must(t, b.w.Close())
	if n.Open() {
		t.Fatal("the notifier kept its descriptor after its last watch closed")
	}
	if _, err := b.w.Scan(context.Background(), filetree.ScanOptions{}); err == nil {
		t.Error("a closed watch scanned")
	}
	// A new watch opens it again.
	c := watch(t, &n, base(t))
	c.check("c", "first scan")
}

func TestWatchRefusesInclude(t *testing.T) {
	var n filetree.Notifier
	if _, err := n.Watch(t.TempDir(), filetree.ScanOptions{Include: []string{".claude/projects"}}); err == nil {
		t.Fatal("watched a scan with included paths")
	}
}
