// Package local runs sandboxes on the runner's own host. Each sandbox is a
// directory under the data dir (work, home, tmp) and its processes are host
// processes in their own process group, killed as a group.
//
// Isolation "none" is the Agenta runner's unconfined host process, for
// development: the environment is scrubbed, but the harness can read what
// the runner's user can read.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

// Config configures the local provider.
type Config struct {
	// Dir is where sandbox directories are created (<data dir>/sandboxes).
	Dir string
	// Isolation is "none" (host process).
	Isolation string
	Logger    *slog.Logger
}

// Provider creates local sandboxes.
type Provider struct {
	cfg Config
	log *slog.Logger
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Describer = (*Provider)(nil)
	_ sandbox.Sandbox   = (*Sandbox)(nil)
)

// New returns a local provider. It fails when the isolation asked for
// cannot be had on this host.
func New(cfg Config) (*Provider, error) {
	if cfg.Isolation == "" {
		cfg.Isolation = "none"
	}
	if cfg.Isolation != "none" {
		return nil, errdefs.Unprocessablef("local isolation %q is not supported by this build; set AGENTA_RUNNER_LOCAL_ISOLATION=none", cfg.Isolation)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox dir: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{cfg: cfg, log: log}, nil
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return "local" }

// Describe implements sandbox.Describer.
func (p *Provider) Describe() map[string]any {
	return map[string]any{"isolation": p.cfg.Isolation}
}

// Create implements sandbox.Provider.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if spec.Network.Mode != "" && spec.Network.Mode != "on" {
		return nil, errdefs.Unprocessablef("sandboxPermission.network.mode %q needs local isolation; the local provider runs with AGENTA_RUNNER_LOCAL_ISOLATION=none", spec.Network.Mode)
	}
	if spec.ReadOnly {
		return nil, errdefs.Unprocessablef("sandboxPermission.filesystem \"readonly\" needs local isolation; the local provider runs with AGENTA_RUNNER_LOCAL_ISOLATION=none")
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "local-" + hex.EncodeToString(b[:])
	root := filepath.Join(p.cfg.Dir, id)
	sb := &Sandbox{
		root: root,
		info: sandbox.Info{
			ID:        id,
			Provider:  "local",
			Workdir:   filepath.Join(root, "work"),
			Home:      filepath.Join(root, "home"),
			Isolation: p.cfg.Isolation,
		},
		log: p.log.With(logkey.Sandbox, id),
	}
	sb.info.HostWorkdir = sb.info.Workdir
	for _, d := range []string{sb.info.Workdir, sb.info.Home, filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	return sb, nil
}

// Sandbox is one local sandbox.
type Sandbox struct {
	root string
	info sandbox.Info
	log  *slog.Logger

	// mu guards the following.
	mu        sync.Mutex
	procs     map[*process]struct{}
	destroyed bool
}

// Info implements sandbox.Sandbox.
func (s *Sandbox) Info() sandbox.Info { return s.info }

// Start implements sandbox.Sandbox.
func (s *Sandbox) Start(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
	path := c.Path
	if !filepath.IsAbs(path) {
		lp, err := lookPath(path, c.Env)
		if err != nil {
			return nil, err
		}
		path = lp
	}
	dir := c.Dir
	if dir == "" {
		dir = s.info.Workdir
	}
	cmd := exec.Command(path, c.Args...)
	cmd.Env = append(append([]string(nil), c.Env...), "TMPDIR="+filepath.Join(s.root, "tmp"))
	cmd.Dir = dir
	// Own process group so Kill reaches grandchildren; Pdeathsig so a runner
	// crash does not leave the harness running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stdin: stdin, stdout: stdout, stderr: newTail(8 << 10), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return nil, fmt.Errorf("start in sandbox %s: %w", s.info.ID, errdefs.With(errdefs.ErrConflict, errors.New("sandbox destroyed")))
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	if s.procs == nil {
		s.procs = map[*process]struct{}{}
	}
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	s.log.Debug("process started", logkey.PID, cmd.Process.Pid)

	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
		s.mu.Lock()
		delete(s.procs, p)
		s.mu.Unlock()
	}()
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				_ = p.Kill()
			case <-p.done:
			}
		}()
	}
	return p, nil
}

// WriteFile implements sandbox.Sandbox.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	if !within(path, s.info.Workdir) && !within(path, s.info.Home) {
		return errdefs.Invalidf("write %s: outside the sandbox's workdir and home", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	return os.WriteFile(path, data, os.FileMode(mode))
}

// Destroy implements sandbox.Sandbox.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	s.destroyed = true
	procs := make([]*process, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.Kill()
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
	if err := os.RemoveAll(s.root); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.info.ID, err)
	}
	return nil
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// lookPath resolves name against the PATH of the process's own environment,
// not the runner's.
func lookPath(name string, env []string) (string, error) {
	pathVar := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	if strings.Contains(name, "/") {
		return "", errdefs.Invalidf("command %q: relative paths are not allowed", name)
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errdefs.With(errdefs.ErrNotFound, fmt.Errorf("command %q not found in PATH %q", name, pathVar))
}

type process struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  io.Reader
	stderr  *tail
	done    chan struct{}
	waitErr error
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.stdout }
func (p *process) StderrTail() string    { return p.stderr.String() }

func (p *process) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	// The whole group: adapters fork the real agent.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

func (p *process) Wait() error {
	<-p.done
	return exitError(p.waitErr)
}

func exitError(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	out := &sandbox.ExitError{Code: ee.ExitCode()}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		out.Code = -1
		out.Signal = ws.Signal().String()
	}
	return out
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
