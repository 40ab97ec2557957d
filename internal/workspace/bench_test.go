package workspace_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
)

// The benchmark workspace: 10,000 files, 200 MB (20 KB each, 100 per
// directory), generated once per run in a temp dir, never committed.
const (
	benchFiles = 10_000
	benchSize  = 20 << 10
)

var benchTree string

func benchWorkspace(b *testing.B) string {
	b.Helper()
	if benchTree != "" {
		return benchTree
	}
	dir, err := os.MkdirTemp("", "runner-bench-ws-")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, benchSize)
	for i := range benchFiles {
		_, _ = rand.Read(buf)
		p := filepath.Join(dir, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%05d.bin", i))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	benchTree = dir
	return dir
}

// TestMain removes the benchmarks' shared tree and fails the package's
// tests when one leaves a goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(leaktest.Global(), goleak.Cleanup(func(code int) {
		if benchTree != "" {
			os.RemoveAll(benchTree)
		}
		os.Exit(code)
	}))...)
}

func newStore(b *testing.B) workspace.Store {
	st, err := fs.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// BenchmarkCheckpointFull: the first checkpoint of the whole workspace.
func BenchmarkCheckpointFull(b *testing.B) {
	src := benchWorkspace(b)
	ctx := context.Background()
	b.SetBytes(benchFiles * benchSize)
	for b.Loop() {
		b.StopTimer()
		m := workspace.Mount{Name: "bench", Store: newStore(b), Root: src}
		b.StartTimer()
		if _, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRestoreFull: the whole workspace into a fresh sandbox.
func BenchmarkRestoreFull(b *testing.B) {
	src := benchWorkspace(b)
	ctx := context.Background()
	m := workspace.Mount{Name: "bench", Store: newStore(b), Root: src}
	if _, _, err := workspace.Checkpoint(ctx, filetree.Local{}, m, workspace.Manifest{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchFiles * benchSize)
	for b.Loop() {
		b.StopTimer()
		dst := filepath.Join(b.TempDir(), "ws")
		m2 := m
		m2.Root = dst
		b.StartTimer()
		if _, st, err := workspace.Restore(ctx, filetree.Local{}, m2); err != nil || st.Transferred != benchFiles {
			b.Fatalf("restore: %+v, %v", st, err)
		}
	}
}

// BenchmarkCheckpointIncremental: one changed file after a checkpoint
// (target < 100 ms), next to the same checkpoint with nothing changed;
// through an inotify watch (how the local provider's sandboxes
// checkpoint), and with a full scan each time (a remote sandbox, or a
// watch that fell back).
func BenchmarkCheckpointIncremental(b *testing.B) {
	src := benchWorkspace(b)
	ctx := context.Background()
	target := filepath.Join(src, "d042", "f04200.bin")
	i := 0
	for _, mode := range []string{"watched", "full-scan"} {
		m := workspace.Mount{Name: "bench", Store: newStore(b), Root: src}
		var tr workspace.Tree = filetree.Local{}
		if mode == "watched" {
			var n filetree.Notifier
			w, err := n.Watch(src, m.ScanOptions(workspace.Manifest{}))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			tr = workspace.Watched(tr, src, w)
		}
		man, _, err := workspace.Checkpoint(ctx, tr, m, workspace.Manifest{})
		if err != nil {
			b.Fatal(err)
		}
		name := func(s string) string {
			if mode == "watched" {
				return s
			}
			return mode + "/" + s
		}
		b.Run(name("unchanged"), func(b *testing.B) {
			for b.Loop() {
				var st workspace.Stats
				if man, st, err = workspace.Checkpoint(ctx, tr, m, man); err != nil || st.Wrote {
					b.Fatalf("checkpoint: %+v, %v", st, err)
				}
			}
		})
		b.Run(name("one-changed"), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				i++
				if err := os.WriteFile(target, fmt.Appendf(nil, "version %d", i), 0o644); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				var st workspace.Stats
				if man, st, err = workspace.Checkpoint(ctx, tr, m, man); err != nil || st.Transferred != 1 {
					b.Fatalf("checkpoint: %+v, %v", st, err)
				}
			}
		})
	}
}

// BenchmarkStatBaseline is the floor under every incremental checkpoint:
// walking the workspace and stat-ing each entry, nothing else.
func BenchmarkStatBaseline(b *testing.B) {
	src := benchWorkspace(b)
	for b.Loop() {
		n := 0
		err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if _, err := d.Info(); err != nil {
				return err
			}
			n++
			return nil
		})
		if err != nil || n < benchFiles {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkScanParallel is the scan a watcher-less checkpoint makes, every
// hash known: to hold against BenchmarkStatBaseline.
func BenchmarkScanParallel(b *testing.B) {
	src := benchWorkspace(b)
	known, err := filetree.Scan(src, filetree.ScanOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := filetree.Scan(src, filetree.ScanOptions{Known: known.Entries, TrustBefore: known.Time + 1e15})
		if err != nil || res.Hashed != 0 || len(res.Entries) < benchFiles {
			b.Fatal(res.Hashed, len(res.Entries), err)
		}
	}
}
