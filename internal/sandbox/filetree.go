package sandbox

import (
	"context"
	"io"

	"github.com/agentrunner/runner/internal/filetree"
)

// FileTree is a Sandbox whose files the runner can list and move in bulk:
// what the durable workspace sync needs. A remote provider serves it over
// its own connection (sandboxd), so the object store never has to be
// reachable from the sandbox. Roots are absolute paths in the sandbox:
// its Workdir, Workdir+"-agent" (the agent's shared folder) or Home.
type FileTree interface {
	Scan(ctx context.Context, root string, opt filetree.ScanOptions) (filetree.Result, error)
	Export(ctx context.Context, root string, paths []string) (io.ReadCloser, error)
	Import(ctx context.Context, root string, r io.Reader) error
}

// AgentDir is where a sandbox keeps the agent's shared folder: beside
// its working directory.
func AgentDir(info Info) string {
	if info.AgentDir != "" {
		return info.AgentDir // a caller's own workdir gets nothing beside it
	}
	return info.Workdir + "-agent"
}

// TreeWatcher is a FileTree that can follow a root's changes, so that a
// checkpoint reads again only the directories that changed (the local
// provider: inotify on the runner's own disk). Include is not supported.
type TreeWatcher interface {
	WatchTree(root string, opt filetree.ScanOptions) (TreeWatch, error)
}

// TreeWatch is one followed root; Close stops following it.
type TreeWatch interface {
	Scan(ctx context.Context, opt filetree.ScanOptions) (filetree.Result, error)
	Close() error
}
