package filetree_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/filetree"
)

// walkScan is the scan as it was before it read directories in parallel
// (filepath.WalkDir and an Lstat per entry): the parallel one must list
// exactly what it listed.
func walkScan(root string, opt filetree.ScanOptions) ([]filetree.Entry, error) {
	var out []filetree.Entry
	starts := []string{""}
	if len(opt.Include) > 0 {
		starts = opt.Include
	}
	seen := map[string]bool{}
	for _, start := range starts {
		err := filepath.WalkDir(filepath.Join(root, start), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if rel == "." {
				return nil
			}
			if filetree.Excluded(rel, opt.Exclude) || seen[rel] {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			seen[rel] = true
			info, err := d.Info()
			if err != nil {
				return err
			}
			m := info.Mode()
			e := filetree.Entry{Path: rel, Mode: uint32(m.Perm())}
			if m&fs.ModeSetuid != 0 {
				e.Mode |= 0o4000
			}
			if m&fs.ModeSetgid != 0 {
				e.Mode |= 0o2000
			}
			if m&fs.ModeSticky != 0 {
				e.Mode |= 0o1000
			}
			switch {
			case m.IsRegular():
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				h := sha256.New()
				n, _ := io.Copy(h, f)
				f.Close()
				e.Kind, e.Size, e.MTime, e.Hash = filetree.File, n, info.ModTime().UnixNano(), hex.EncodeToString(h.Sum(nil))
			case m.IsDir():
				e.Kind = filetree.Dir
			case m&fs.ModeSymlink != 0:
				t, _ := os.Readlink(p)
				e.Kind, e.Target, e.Mode = filetree.Symlink, t, 0o777
			default:
				return nil
			}
			out = append(out, e)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sample is a tree with what sorts tricky ("a", "a.txt", "a/…", "a-b"),
// every kind the sync keeps and one it skips, special mode bits and
// excluded names.
func sample(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range []string{"a/x", "a/y/z", "a.txt", "a-b/c", "a0", "b/.credentials.json", "b/deep/er/est/f", "skip/me", "sub/skip/kept", "é/ü", "sp ace/q\"uote"} {
		write(t, root, p, "content of "+p)
	}
	for _, d := range []string{"empty", "a/empty"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../a.txt", filepath.Join(root, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "a", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "a0"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "empty"), 0o1777); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestScanMatchesWalk(t *testing.T) {
	root := sample(t)
	for name, opt := range map[string]filetree.ScanOptions{
		"all":      {},
		"excluded": {Exclude: []string{".credentials.json", "/skip", "*.txt"}},
		"included": {Include: []string{"b", "a/y", "a", "a.txt", "missing", "dirlink"}, Exclude: []string{"/a/y"}},
	} {
		t.Run(name, func(t *testing.T) {
			want, err := walkScan(root, opt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := filetree.Scan(root, opt)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got.Entries); diff != "" {
				t.Errorf("scan differs from the walk (-walk +scan):\n%s", diff)
			}
		})
	}
}

func TestScanKnownHashes(t *testing.T) {
	root := sample(t)
	first, err := filetree.Scan(root, filetree.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Trusted: nothing is read again.
	again, err := filetree.Scan(root, filetree.ScanOptions{Known: first.Entries, TrustBefore: first.Time + 1e12})
	if err != nil {
		t.Fatal(err)
	}
	if again.Hashed != 0 {
		t.Errorf("hashed %d files with every hash known", again.Hashed)
	}
	if diff := cmp.Diff(first.Entries, again.Entries); diff != "" {
		t.Errorf("(-first +again):\n%s", diff)
	}
	// Modified in the instant of the earlier scan: read again.
	again, err = filetree.Scan(root, filetree.ScanOptions{Known: first.Entries, TrustBefore: 0})
	if err != nil {
		t.Fatal(err)
	}
	if again.Hashed == 0 {
		t.Error("no file hashed again though none was trusted")
	}
}

func TestScanMissingRoot(t *testing.T) {
	res, err := filetree.Scan(filepath.Join(t.TempDir(), "none"), filetree.ScanOptions{})
	if err != nil || len(res.Entries) != 0 {
		t.Fatalf("scan of a missing root = %v, %v; want empty", res.Entries, err)
	}
}
