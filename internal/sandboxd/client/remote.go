package client

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// Remote is the part of a remote provider's sandbox that its daemon
// serves, the same on every provider: processes, files, channels and
// trees. A provider embeds it and adds its own lifecycle (Destroy, Pause,
// Probe); Destroyed, which it sets, makes Start refuse afterwards.
type Remote struct {
	Daemon *Client
	Meta   sandbox.Info // what Info returns
	Socket string       // where processes Dial channels
	Runner string       // the runner binary inside, for RunnerPath
	// Destroyed reports whether the provider destroyed the sandbox.
	Destroyed func() bool
}

var (
	_ sandbox.Channeler   = (*Remote)(nil)
	_ sandbox.FileTree    = (*Remote)(nil)
	_ sandbox.TreeWatcher = (*Remote)(nil)
)

// Info describes the sandbox.
func (s *Remote) Info() sandbox.Info { return s.Meta }

// Start runs cmd in the sandbox through the daemon. Cancelling ctx kills
// the process.
func (s *Remote) Start(ctx context.Context, cmd sandbox.Cmd) (sandbox.Process, error) {
	if cmd.Path == "" {
		return nil, errdefs.Invalidf("start in sandbox %s: empty command", s.Meta.ID)
	}
	if s.Destroyed != nil && s.Destroyed() {
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("start in sandbox %s: it is destroyed", s.Meta.ID))
	}
	p, err := s.Daemon.Start(ctx, sandboxd.StartRequest{
		Argv: append([]string{cmd.Path}, cmd.Args...),
		Env:  cmd.Env,
		Dir:  cmd.Dir,
	}, cmd.WaitDelay)
	if err != nil {
		return nil, fmt.Errorf("start %s in sandbox %s: %w", cmd.Path, s.Meta.ID, err)
	}
	return p, nil
}

// RunnerPath is where the runner binary lives in the sandbox.
func (s *Remote) RunnerPath() string { return s.Runner }

// ChannelEnv is what a process in the sandbox needs in its environment
// to open a channel with sandboxd.Dial: RUNNER_SANDBOXD_SOCKET.
func (s *Remote) ChannelEnv() []string {
	return []string{sandboxd.SocketEnv + "=" + s.Socket}
}

// Accept waits for a process in the sandbox to open a channel named name
// with sandboxd.Dial (its environment needs ChannelEnv) and returns it: Stdin writes to that
// process, Stdout reads from it, Kill closes it. This is how the tool relay
// `runner mcp-stdio` reaches the runner. Cancelling ctx stops the wait.
func (s *Remote) Accept(ctx context.Context, name string) (sandbox.Process, error) {
	p, err := s.Daemon.Accept(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("accept channel %q in sandbox %s: %w", name, s.Meta.ID, err)
	}
	return p, nil
}

// WriteFile writes data at path, which must lie under the workdir or home.
func (s *Remote) WriteFile(ctx context.Context, p string, data []byte, mode uint32) error {
	clean := path.Clean(p)
	// The root is the innermost of the two (a home inside the workdir), so
	// the daemon walks the fewest components the agent could have linked.
	root := ""
	for _, d := range []string{s.Meta.Workdir, s.Meta.Home} {
		if within(clean, d) && clean != d && len(d) > len(root) {
			root = d
		}
	}
	if !path.IsAbs(p) || root == "" {
		return errdefs.Invalidf("write %q in sandbox %s: not under %s or %s", p, s.Meta.ID, s.Meta.Workdir, s.Meta.Home)
	}
	if err := s.Daemon.WriteFile(ctx, root, strings.TrimPrefix(clean, strings.TrimSuffix(root, "/")+"/"), data, mode); err != nil {
		return fmt.Errorf("write %s in sandbox %s: %w", clean, s.Meta.ID, err)
	}
	return nil
}

func within(p, dir string) bool {
	if dir == "" {
		return false
	}
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// Scan implements sandbox.FileTree through the daemon, which hashes the
// files where they are.
func (s *Remote) Scan(ctx context.Context, root string, opt filetree.ScanOptions) (filetree.Result, error) {
	return s.Daemon.TreeScan(ctx, root, opt)
}

// Export implements sandbox.FileTree.
func (s *Remote) Export(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	return s.Daemon.TreeExport(ctx, root, paths)
}

// Import implements sandbox.FileTree.
func (s *Remote) Import(ctx context.Context, root string, r io.Reader) error {
	return s.Daemon.TreeImport(ctx, root, r)
}

// WatchTree implements sandbox.TreeWatcher: the daemon follows the tree
// with inotify inside the sandbox, and a checkpoint's scan brings back
// only what changed since the previous one. A daemon without watches (an
// older binary baked into a snapshot) gets full scans, as before.
func (s *Remote) WatchTree(root string, opt filetree.ScanOptions) (sandbox.TreeWatch, error) {
	return s.Daemon.WatchTree(root, opt)
}
