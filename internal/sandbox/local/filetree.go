package local

import (
	"context"
	"io"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandbox"
)

var (
	_ sandbox.FileTree    = (*Sandbox)(nil)
	_ sandbox.TreeWatcher = (*Sandbox)(nil)
)

func (s *Sandbox) treeRoot(root string) error {
	for _, d := range []string{s.info.Workdir, sandbox.AgentDir(s.info), s.info.Home} {
		if within(root, d) {
			return nil
		}
	}
	return errdefs.Invalidf("sandbox %s: %s is outside its workdir, agent folder and home", s.info.ID, root)
}

// owner is who what the runner writes into the sandbox belongs to: the
// sandbox user, or nil for the runner's own uid.
func (s *Sandbox) owner() *filetree.Owner {
	if u := s.p.user(); u != nil {
		return &filetree.Owner{UID: u.uid, GID: u.gid}
	}
	return nil
}

func (s *Sandbox) local() filetree.Local {
	return filetree.Local{Owner: s.owner()}
}

// Scan implements sandbox.FileTree.
func (s *Sandbox) Scan(ctx context.Context, root string, opt filetree.ScanOptions) (filetree.Result, error) {
	if err := s.treeRoot(root); err != nil {
		return filetree.Result{}, err
	}
	return s.local().Scan(ctx, root, opt)
}

// Export implements sandbox.FileTree.
func (s *Sandbox) Export(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	if err := s.treeRoot(root); err != nil {
		return nil, err
	}
	return s.local().Export(ctx, root, paths)
}

// Import implements sandbox.FileTree: what it writes belongs to the
// sandbox user.
func (s *Sandbox) Import(ctx context.Context, root string, r io.Reader) error {
	if err := s.treeRoot(root); err != nil {
		return err
	}
	return s.local().Import(ctx, root, r)
}

// WatchTree implements sandbox.TreeWatcher: the provider's one inotify
// instance follows the tree.
func (s *Sandbox) WatchTree(root string, opt filetree.ScanOptions) (sandbox.TreeWatch, error) {
	if err := s.treeRoot(root); err != nil {
		return nil, err
	}
	return s.p.notifier.Watch(root, opt)
}
