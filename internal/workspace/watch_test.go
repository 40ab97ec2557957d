package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
)

// TestWatchedCheckpointMatchesFullScan checkpoints one tree twice after
// every change, through a watch and through full scans, into two stores:
// the manifests are the same, and the watched store restores the tree.
func TestWatchedCheckpointMatchesFullScan(t *testing.T) {
	ctx := context.Background()
	root, outside := t.TempDir(), t.TempDir()
	for i := range 5 {
		write(t, root, fmt.Sprintf("src/p%d/main.go", i), "package main", 0o644)
		write(t, root, fmt.Sprintf("src/p%d/data/x.bin", i), "xxxxxxxx", 0o600)
	}
	newStore := func() workspace.Store {
		st, err := fs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	full := workspace.Mount{Name: "workspace", Store: newStore(), Root: root, Exclude: []string{"/agent-files", ".credentials.json"}}
	viaWatch := full
	viaWatch.Store = newStore()
	var n filetree.Notifier
	w, err := n.Watch(root, viaWatch.ScanOptions(workspace.Manifest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	watched := workspace.Watched(filetree.Local{}, root, w)

	var manFull, manWatch workspace.Manifest
	step := func(name string) workspace.Stats {
		t.Helper()
		var stF, stW workspace.Stats
		var err error
		if manFull, stF, err = workspace.Checkpoint(ctx, filetree.Local{}, full, manFull); err != nil {
			t.Fatalf("%s: full checkpoint: %v", name, err)
		}
		if manWatch, stW, err = workspace.Checkpoint(ctx, watched, viaWatch, manWatch); err != nil {
			t.Fatalf("%s: watched checkpoint: %v", name, err)
		}
		if diff := cmp.Diff(manFull.Entries, manWatch.Entries, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: manifests differ (-full +watched):\n%s", name, diff)
		}
		if stF.Wrote != stW.Wrote || stF.Transferred != stW.Transferred || stF.Deleted != stW.Deleted {
			t.Errorf("%s: full checkpoint %+v, watched %+v", name, stF, stW)
		}
		return stW
	}
	step("first")
	if st := step("unchanged"); st.Wrote || st.Dirs != 0 {
		t.Errorf("unchanged: %+v; want no directory read and no manifest written", st)
	}
	for _, s := range []struct {
		name string
		do   func() error
	}{
		{"modify", func() error {
			return os.WriteFile(filepath.Join(root, "src/p1/main.go"), []byte("package changed"), 0o644)
		}},
		{"create a directory with files", func() error {
			write(t, root, "new/a/b", "b", 0o644)
			return os.Symlink("../src", filepath.Join(root, "new/src"))
		}},
		{"rename a directory", func() error { return os.Rename(filepath.Join(root, "src/p2"), filepath.Join(root, "new/p2")) }},
		{"move a directory in from outside", func() error {
			write(t, outside, "in/deep/f", "from outside", 0o644)
			return os.Rename(filepath.Join(outside, "in"), filepath.Join(root, "src/in"))
		}},
		{"a file where a directory was", func() error {
			if err := os.RemoveAll(filepath.Join(root, "src/p3")); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(root, "src/p3"), []byte("now a file"), 0o644)
		}},
		{"a directory where a file was", func() error {
			if err := os.Remove(filepath.Join(root, "src/p3")); err != nil {
				return err
			}
			write(t, root, "src/p3/again", "a directory again", 0o644)
			return nil
		}},
		{"delete a tree", func() error { return os.RemoveAll(filepath.Join(root, "new")) }},
		{"chmod", func() error { return os.Chmod(filepath.Join(root, "src/p0/data/x.bin"), 0o644) }},
	} {
		if err := s.do(); err != nil {
			t.Fatal(err)
		}
		if st := step(s.name); st.Full != "" {
			t.Errorf("%s: the watched checkpoint read the whole tree: %s", s.name, st.Full)
		}
	}
	dst := workspace.Mount{Name: "workspace", Store: viaWatch.Store, Root: filepath.Join(t.TempDir(), "ws")}
	if _, _, err := workspace.Restore(ctx, filetree.Local{}, dst); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snapshot(t, root), snapshot(t, dst.Root), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("restored from the watched store (-source +restored):\n%s", diff)
	}
}

// FuzzManifestEncoding holds the manifest's own encoder to encoding/json.
func FuzzManifestEncoding(f *testing.F) {
	f.Add("src/main.go", "f", uint32(0o644), int64(12), int64(1_700_000_000_000_000_000), "ab12", "")
	f.Add("a<b>&\"c\\\x01é\xff", "l", uint32(0o777), int64(0), int64(0), "", "../../ta\u2028rget")
	f.Fuzz(func(t *testing.T, p, kind string, mode uint32, size, mtime int64, hash, target string) {
		for _, m := range []workspace.Manifest{
			{Version: 1, Time: mtime, Entries: []filetree.Entry{{Path: p, Kind: kind, Mode: mode, Size: size, MTime: mtime, Hash: hash, Target: target}, {Path: target, Kind: "d"}}},
			{Version: 1},
			{Version: 1, Entries: []filetree.Entry{}},
		} {
			want, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := workspace.AppendManifest(nil, m); string(got) != string(want) {
				t.Fatalf("encoded\n%s\nencoding/json:\n%s", got, want)
			}
		}
	})
}
