package workspace_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
)

func write(t testing.TB, root, rel, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// snapshot lists a tree as the sync sees it, without times.
func snapshot(t *testing.T, root string, exclude ...string) []filetree.Entry {
	t.Helper()
	r, err := filetree.Scan(root, filetree.ScanOptions{Exclude: exclude})
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Entries {
		r.Entries[i].MTime = 0
	}
	return r.Entries
}

func newMount(t *testing.T, root string) workspace.Mount {
	st, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return workspace.Mount{Name: "workspace", Store: st, Root: root, Exclude: []string{".credentials.json", "auth.json", "/agent-files"}}
}

func TestCheckpointRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	write(t, src, "main.go", "package main\n", 0o644)
	write(t, src, "bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
	write(t, src, "deep/a/b/c.txt", "c", 0o600)
	write(t, src, ".claude/.credentials.json", "secret", 0o600)
	write(t, src, "auth.json", "secret", 0o600)
	if err := os.MkdirAll(filepath.Join(src, "empty/dir"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("main.go", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent/dangling", filepath.Join(src, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../elsewhere", filepath.Join(src, "agent-files")); err != nil {
		t.Fatal(err)
	}
	m := newMount(t, src)
	man, st, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 3 || !st.Wrote {
		t.Fatalf("first checkpoint: %+v, want 3 files written and the manifest", st)
	}
	for _, e := range man.Entries {
		if e.Path == "auth.json" || filepath.Base(e.Path) == ".credentials.json" || e.Path == "agent-files" {
			t.Fatalf("excluded %s reached the manifest", e.Path)
		}
	}

	dst := filepath.Join(t.TempDir(), "fresh")
	m2 := m
	m2.Root = dst
	_, st, err = workspace.Restore(ctx, filetree.Local{}, m2)
	if err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 3 {
		t.Fatalf("restore: %+v", st)
	}
	excl := []string{".credentials.json", "auth.json", "/agent-files"}
	if diff := cmp.Diff(snapshot(t, src, excl...), snapshot(t, dst)); diff != "" {
		t.Fatalf("restored tree differs (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(dst, ".claude/.credentials.json")); !os.IsNotExist(err) {
		t.Fatalf("credentials restored: %v", err)
	}
}

func TestCheckpointIncrementalAndDeletes(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	for i := range 50 {
		write(t, src, filepath.Join("d", string(rune('a'+i%26)), "f"+string(rune('0'+i%10))+".txt"), "content", 0o644)
	}
	write(t, src, "gone.txt", "bye", 0o644)
	write(t, src, "becomes-dir", "file", 0o644)
	write(t, src, "was-dir/x", "x", 0o644)
	m := newMount(t, src)
	man, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing changed: nothing read, nothing written.
	time.Sleep(10 * time.Millisecond) // let the clock pass the scan so the stat cache trusts its files
	man, st, err := workspace.Checkpoint(ctx, filetree.Local{}, m, man)
	if err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 0 || st.Wrote {
		t.Fatalf("unchanged checkpoint: %+v", st)
	}
	write(t, src, "d/a/f0.txt", "changed", 0o644)
	if err := os.Remove(filepath.Join(src, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(src, "becomes-dir"))
	write(t, src, "becomes-dir/inner", "now a dir", 0o644)
	os.RemoveAll(filepath.Join(src, "was-dir"))
	write(t, src, "was-dir", "now a file", 0o644)
	if err := os.Chmod(filepath.Join(src, "d/b/f1.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	man, st, err = workspace.Checkpoint(ctx, filetree.Local{}, m, man)
	if err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 3 || st.Deleted != 3 || !st.Wrote {
		t.Fatalf("incremental checkpoint: %+v, want 3 files put and 3 objects deleted", st)
	}
	keys, err := m.Store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k == "gone.txt" || k == "becomes-dir" || k == "was-dir/x" {
			t.Fatalf("object %s outlived its file", k)
		}
	}
	dst := t.TempDir()
	m2 := m
	m2.Root = dst
	if _, _, err := workspace.Restore(ctx, filetree.Local{}, m2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dst)); diff != "" {
		t.Fatalf("restored tree differs (-want +got):\n%s", diff)
	}
}

// TestRestoreOnlyWhatDiffers: a tree that already holds most of the
// store gets only the difference, and loses what the store does not have.
func TestRestoreOnlyWhatDiffers(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	write(t, src, "a.txt", "a", 0o644)
	write(t, src, "b.txt", "b", 0o644)
	write(t, src, "sub/c.txt", "c", 0o644)
	m := newMount(t, src)
	if _, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	m2 := m
	m2.Root = dst
	if _, _, err := workspace.Restore(ctx, filetree.Local{}, m2); err != nil {
		t.Fatal(err)
	}
	write(t, dst, "b.txt", "stale edit", 0o644)
	write(t, dst, "extra/new.txt", "not in the store", 0o644)
	_, st, err := workspace.Restore(ctx, filetree.Local{}, m2)
	if err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 1 || st.Deleted != 1 {
		t.Fatalf("second restore: %+v, want 1 file copied and 1 entry removed", st)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dst)); diff != "" {
		t.Fatalf("tree differs (-want +got):\n%s", diff)
	}
}

// TestRestoredTreeNeedsNoRehash: after a restore (on a fresh runner, with
// no cache of its own), the next checkpoint trusts the restored files
// instead of reading them all.
func TestRestoredTreeNeedsNoRehash(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	for i := range 20 {
		write(t, src, filepath.Join("f", string(rune('a'+i))), "x", 0o644)
	}
	m := newMount(t, src)
	if _, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	m2 := m
	m2.Root = dst
	man, _, err := workspace.Restore(ctx, filetree.Local{}, m2)
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := workspace.Checkpoint(ctx, filetree.Local{}, m2, man)
	if err != nil {
		t.Fatal(err)
	}
	if st.Hashed != 0 || st.Wrote {
		t.Fatalf("checkpoint after restore: %+v, want nothing re-read or written", st)
	}
}

func TestRestoreRefusesEscapes(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(src, "out")); err != nil {
		t.Fatal(err)
	}
	m := newMount(t, src)
	man, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	// A manifest naming a file behind the symlink must not write through it.
	man.Entries = append(man.Entries, filetree.Entry{Path: "out/pwned", Kind: filetree.File, Mode: 0o644, Size: 1, Hash: filetree.HashBytes([]byte("x"))})
	if err := m.Store.Put(ctx, "out/pwned", stringsReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, m.Store, man)
	dst := t.TempDir()
	m2 := m
	m2.Root = dst
	_, _, _ = workspace.Restore(ctx, filetree.Local{}, m2)
	if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
		t.Fatal("restore wrote through a symlink out of the tree")
	}
}

// lyingTree is a sandbox whose export stream carries an entry nobody
// asked for.
type lyingTree struct{ filetree.Local }

func (l lyingTree) Export(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte(`{"version":1,"entries":[]}`)
	_ = tw.WriteHeader(&tar.Header{Name: "injected.txt", Typeflag: tar.TypeReg, Size: int64(len(body)), Mode: 0o644})
	_, _ = tw.Write(body)
	rc, err := l.Local.Export(ctx, root, paths)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		_ = tw.WriteHeader(hdr)
		_, _ = io.Copy(tw, tr)
	}
	_ = tw.Close()
	return io.NopCloser(&buf), nil
}

func TestCheckpointIgnoresUnaskedEntries(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	write(t, src, "a.txt", "a", 0o644)
	m := newMount(t, src)
	man, st, err := workspace.Checkpoint(ctx, lyingTree{}, m, workspace.Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 1 || len(man.Entries) != 1 {
		t.Fatalf("checkpoint: %+v, %d entries", st, len(man.Entries))
	}
	if _, err := m.Store.Get(ctx, "injected.txt"); err == nil {
		t.Fatal("an entry the runner did not ask for reached the store")
	}
}
