package daytona

import (
	"context"
	"io"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandbox"
)

var (
	_ sandbox.FileTree    = (*Sandbox)(nil)
	_ sandbox.TreeWatcher = (*Sandbox)(nil)
)

// Scan implements sandbox.FileTree through the sandbox's daemon, which
// hashes the files where they are.
func (s *Sandbox) Scan(ctx context.Context, root string, opt filetree.ScanOptions) (filetree.Result, error) {
	return s.daemon.TreeScan(ctx, root, opt)
}

// Export implements sandbox.FileTree.
func (s *Sandbox) Export(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	return s.daemon.TreeExport(ctx, root, paths)
}

// Import implements sandbox.FileTree.
func (s *Sandbox) Import(ctx context.Context, root string, r io.Reader) error {
	return s.daemon.TreeImport(ctx, root, r)
}

// WatchTree implements sandbox.TreeWatcher: the daemon follows the tree
// with inotify inside the sandbox, and a checkpoint's scan brings back
// only what changed since the previous one. A daemon without watches (an
// older binary baked into a snapshot) gets full scans, as before.
func (s *Sandbox) WatchTree(root string, opt filetree.ScanOptions) (sandbox.TreeWatch, error) {
	return s.daemon.WatchTree(root, opt)
}
