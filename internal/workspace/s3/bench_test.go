package s3_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/s3"
	"github.com/agentrunner/runner/internal/workspace/workspacetest"
)

// BenchmarkS3Checkpoint: a 1,000-file / 20 MB workspace on the real
// SeaweedFS server: the full checkpoint, the full restore, and the
// incremental checkpoint of one changed file.
func BenchmarkS3Checkpoint(b *testing.B) {
	sw := workspacetest.S3(b)
	src := b.TempDir()
	buf := make([]byte, 20<<10)
	for i := range 1000 {
		_, _ = rand.Read(buf)
		p := filepath.Join(src, fmt.Sprintf("d%02d", i/100), fmt.Sprintf("f%04d", i))
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	bucket := sw.Bucket(b)
	mount := func() workspace.Mount {
		st := s3.New(workspace.NewKeeper(workspace.Static(adminLease(sw, bucket)), nil), s3.Options{})
		return workspace.Mount{Name: "bench", Store: st, Root: src}
	}
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := workspace.Checkpoint(ctx, filetree.Local{}, mount(), workspace.Manifest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	m := mount()
	man, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			m2 := m
			m2.Root = filepath.Join(b.TempDir(), "ws")
			b.StartTimer()
			if _, _, err := workspace.Restore(ctx, filetree.Local{}, m2); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-changed", func(b *testing.B) {
		i := 0
		for b.Loop() {
			b.StopTimer()
			i++
			_ = os.WriteFile(filepath.Join(src, "d04", "f0420"), fmt.Appendf(nil, "v%d", i), 0o644)
			b.StartTimer()
			if man, _, err = workspace.Checkpoint(ctx, filetree.Local{}, m, man); err != nil {
				b.Fatal(err)
			}
		}
	})
}
