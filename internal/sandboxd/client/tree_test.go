package client

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// TestTreeRoundTrip moves a tree out of one root and into another through
// the daemon's bulk API, in several import batches.
func TestTreeRoundTrip(t *testing.T) {
	_, hs := newTestServer(t, sandboxd.Config{Token: "tok"})
	c := New(Config{BaseURL: hs.URL, Token: "tok"})
	ctx := context.Background()
	src := t.TempDir()
	big := make([]byte, importBatch+1)
	for i := range big {
		big[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(src, "big"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, "d/empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "d/x.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/x.sh", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	res, err := c.TreeScan(ctx, src, filetree.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range res.Entries {
		paths = append(paths, e.Path)
	}
	rc, err := c.TreeExport(ctx, src, paths)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	err = c.TreeImport(ctx, dst, rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.TreeScan(ctx, dst, filetree.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	strip := func(es []filetree.Entry) []filetree.Entry {
		for i := range es {
			es[i].MTime = 0
		}
		return es
	}
	if diff := cmp.Diff(strip(res.Entries), strip(got.Entries)); diff != "" {
		t.Fatalf("imported tree (-want +got):\n%s", diff)
	}
	if _, err := c.TreeScan(ctx, "relative", filetree.ScanOptions{}); err == nil {
		t.Fatal("a relative root was accepted")
	}
	_ = io.EOF
}
