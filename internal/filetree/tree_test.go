package filetree_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrunner/runner/internal/filetree"
)

func TestExcluded(t *testing.T) {
	pats := []string{".credentials.json", "*.sqlite*", "/agent-files", "/.cache"}
	for rel, want := range map[string]bool{
		".claude/.credentials.json": true,
		"state.sqlite":              true,
		"a/state.sqlite-wal":        true,
		"agent-files":               true,
		"agent-files/x":             true,
		"sub/agent-files":           false,
		".cache/x/y":                true,
		"src/.cache":                false,
		"main.go":                   false,
	} {
		if got := filetree.Excluded(rel, pats); got != want {
			t.Errorf("Excluded(%q) = %v, want %v", rel, got, want)
		}
	}
}

func TestScanInclude(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{".claude/projects/x/s.jsonl", ".claude/settings.json", "other/f"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	res, err := filetree.Scan(root, filetree.ScanOptions{Include: []string{".claude/projects", "missing"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range res.Entries {
		got = append(got, e.Path)
	}
	want := []string{".claude/projects", ".claude/projects/x", ".claude/projects/x/s.jsonl"}
	if len(got) != len(want) {
		t.Fatalf("scan = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("scan = %v, want %v", got, want)
		}
	}
}

// FuzzImport: whatever tar stream arrives, nothing is written outside
// the root.
func FuzzImport(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "../outside"})
	_ = tw.WriteHeader(&tar.Header{Name: "link/escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	_, _ = tw.Write([]byte("x"))
	_ = tw.WriteHeader(&tar.Header{Name: "../up", Typeflag: tar.TypeReg, Mode: 0o644})
	_ = tw.WriteHeader(filetree.DeleteHeader("a"))
	_ = tw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		outside := filepath.Join(base, "outside")
		if err := os.MkdirAll(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = filetree.Import(root, bytes.NewReader(b), nil)
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "root" && e.Name() != "outside" {
				t.Fatalf("import wrote %s beside its root", e.Name())
			}
		}
		if in, _ := os.ReadDir(outside); len(in) != 0 {
			t.Fatalf("import wrote %d entries outside its root", len(in))
		}
	})
}
