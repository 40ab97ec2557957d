package filetree_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/filetree"
)

// victim is a host file outside every root; the tests assert that it keeps
// its content.
func victim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rootWithFile is a root holding d/f, "in".
func rootWithFile(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d/f"), []byte("in"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// plant makes each link in root point at its target.
func plant(t *testing.T, root string, links map[string]string) {
	t.Helper()
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
}

func untouched(t *testing.T, p string) {
	t.Helper()
	if b, err := os.ReadFile(p); err != nil || string(b) != "host" {
		t.Fatalf("host file %s = %q, %v; want it untouched", p, b, err)
	}
}

func TestWriteFileReplacesALinkAtThePath(t *testing.T) {
	root, v := t.TempDir(), victim(t)
	if err := os.Symlink(v, filepath.Join(root, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	if err := filetree.WriteFile(root, "AGENTS.md", strings.NewReader("mine"), 0o644, 0, nil); err != nil {
		t.Fatal(err)
	}
	untouched(t, v)
	info, err := os.Lstat(filepath.Join(root, "AGENTS.md"))
	if err != nil || !info.Mode().IsRegular() || info.Mode().Perm() != 0o644 {
		t.Fatalf("AGENTS.md = %v, %v; want a regular file 0644", info, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "AGENTS.md")); string(b) != "mine" {
		t.Fatalf("AGENTS.md = %q", b)
	}
}

func TestWriteFileRefusesALinkAmongTheParents(t *testing.T) {
	root, v := t.TempDir(), victim(t)
	outside := filepath.Dir(v)
	inside := filepath.Join(root, "real")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	plant(t, root, map[string]string{"out": outside, "in": inside, "file": v})
	if err := os.WriteFile(filepath.Join(root, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"out/victim", "out/new", "in/x", "file/x", "plain/x", "real/../out/victim"} {
		err := filetree.WriteFile(root, rel, strings.NewReader("mine"), 0o644, 0, nil)
		if !errors.Is(err, filetree.ErrLink) {
			t.Errorf("write %s: %v, want ErrLink", rel, err)
		}
	}
	untouched(t, v)
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("outside holds %v, want the victim alone", ents)
	}
	if ents, _ := os.ReadDir(inside); len(ents) != 0 {
		t.Fatalf("a write followed the in-root link: %v", ents)
	}
}

func TestWriteFileCreatesParentsAndRefusesADirectory(t *testing.T) {
	root := t.TempDir()
	if err := filetree.WriteFile(root, "a/b/c.txt", strings.NewReader("x"), 0o600, 0, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a/b/c.txt")); err != nil || string(b) != "x" {
		t.Fatalf("a/b/c.txt = %q, %v", b, err)
	}
	if err := filetree.WriteFile(root, "a/b", strings.NewReader("x"), 0o600, 0, nil); err == nil || !strings.Contains(err.Error(), "a/b") {
		t.Fatalf("write over a directory: %v, want an error naming a/b", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "a")); len(ents) != 1 {
		t.Fatalf("a holds %v, want b alone (no temporary file left)", ents)
	}
	for _, rel := range []string{"../x", "/etc/passwd", "", "."} {
		if err := filetree.WriteFile(root, rel, strings.NewReader("x"), 0o600, 0, nil); err == nil {
			t.Errorf("write %q: no error", rel)
		}
	}
}

func TestOpenNeverFollowsALink(t *testing.T) {
	root, v := rootWithFile(t), victim(t)
	plant(t, root, map[string]string{"leaf": v, "dir": filepath.Dir(v), "inleaf": filepath.Join(root, "d/f"), "indir": "d"})
	f, err := filetree.Open(root, "d/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "in" {
		t.Fatalf("d/f = %q", b)
	}
	for _, rel := range []string{"leaf", "dir/victim", "inleaf", "indir/f"} {
		if f, err := filetree.Open(root, rel); !errors.Is(err, filetree.ErrLink) {
			if f != nil {
				f.Close()
			}
			t.Errorf("open %s: %v, want ErrLink", rel, err)
		}
	}
	if _, err := filetree.Open(root, "missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open missing: %v, want ErrNotExist", err)
	}
}

// A scan limited to a harness directory (the transcript mount) must not
// list what a link standing for one of its parents points at.
func TestScanIncludeNeverFollowsALinkedParent(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "projects"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "projects/secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, ".claude")); err != nil {
		t.Fatal(err)
	}
	res, err := filetree.Scan(root, filetree.ScanOptions{Include: []string{".claude/projects"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != 0 {
		t.Fatalf("scan through the link listed %v, want nothing", res.Entries)
	}
}

// Export reads entries beneath the root only: a path whose parent is a
// link (even one inside the root) is left out, a link is sent as a link.
func TestExportNeverFollowsALink(t *testing.T) {
	root, v := rootWithFile(t), victim(t)
	plant(t, root, map[string]string{"leaf": v, "out": filepath.Dir(v), "indir": "d"})
	var buf bytes.Buffer
	if err := filetree.Export(root, []string{"d/f", "indir/f", "leaf", "out/victim"}, &buf); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[hdr.Name] = string(hdr.Typeflag) + ":" + hdr.Linkname + ":" + string(b)
	}
	want := map[string]string{"d/f": "0::in", "leaf": "2:" + v + ":"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("export (-want +got):\n%s", diff)
	}
}
