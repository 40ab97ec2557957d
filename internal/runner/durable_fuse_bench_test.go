package runner_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/rclone"
	"github.com/agentrunner/runner/internal/workspace/s3"
	"github.com/agentrunner/runner/internal/workspace/workspacetest"
)

// BenchmarkColdTurnLargeWorkspace: a cold turn in a fresh sandbox whose
// session has a 10,000-file / 10 MB workspace on SeaweedFS S3, reading one
// of its files: restored first (sync mode, the default), next to mounted
// (fuse mode), in the same run.
func BenchmarkColdTurnLargeWorkspace(b *testing.B) {
	const files, size = 10_000, 1 << 10
	sw := workspacetest.S3(b)
	fuseCfg := workspacetest.FUSE(b, 0)
	bucket := sw.Bucket(b)
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	lease := workspace.Lease{Endpoint: sw.Endpoint, Region: "us-east-1", Bucket: bucket, Prefix: "bench-" + hex.EncodeToString(rb[:]),
		AccessKey: workspacetest.AdminKey, SecretKey: workspacetest.AdminSecret, Permanent: true}
	src := b.TempDir()
	buf := make([]byte, size)
	for i := range files {
		p := filepath.Join(src, fmt.Sprintf("d%02d", i/100), fmt.Sprintf("f%05d", i))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		_, _ = rand.Read(buf)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, mode := range []string{"sync-restore", "fuse-mount"} {
		b.Run(mode, func(b *testing.B) {
			l := lease
			l.Prefix += "/" + mode
			base := s3.New(workspace.NewKeeper(workspace.Static(l), nil), s3.Options{})
			sess := workspace.Prefixed(base, "sessions/p/s")
			if mode == "sync-restore" {
				m := workspace.Mount{Name: "workspace", Store: sess, Root: src}
				if _, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{}); err != nil {
					b.Fatal(err)
				}
			} else {
				putAll(b, sess, src)
			}
			svc, sandboxes := benchService(b, b.TempDir(), func(cfg *runner.Config) {
				cfg.Workspaces = workspace.Configured{Base: base}
				if mode == "fuse-mount" {
					cfg.Mounter = rclone.New(fuseCfg)
				}
			})
			for b.Loop() {
				b.StopTimer()
				// A fresh sandbox: nothing of the session left on this host.
				if err := os.RemoveAll(filepath.Join(sandboxes, "state")); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := svc.Run(context.Background(), req{session: "s", messages: []string{"exec cat d42/f04217 | wc -c"}}.wire(), nil)
				if err != nil || !res.OK {
					b.Fatalf("turn: %v %+v", err, res)
				}
			}
		})
	}
}

// putAll copies the tree under src into s as plain objects (what fuse
// mode reads), eight at a time.
func putAll(b *testing.B, s workspace.Store, src string) {
	var paths []string
	_ = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	var wg sync.WaitGroup
	work := make(chan string)
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for p := range work {
				data, err := os.ReadFile(p)
				if err == nil {
					rel, _ := filepath.Rel(src, p)
					err = s.Put(context.Background(), filepath.ToSlash(rel), bytes.NewReader(data), int64(len(data)))
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for _, p := range paths {
		work <- p
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
