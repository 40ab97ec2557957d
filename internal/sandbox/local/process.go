package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local/cgroup"
	"github.com/agentrunner/runner/internal/sandbox/local/netstack"
	"github.com/agentrunner/runner/internal/tailbuf"
)

// Start implements sandbox.Sandbox.
func (s *Sandbox) Start(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
	for attempt := 1; ; attempt++ {
		p, err := s.start(ctx, c)
		if err == nil || attempt == setupAttempts || !errors.Is(err, errMountRace) || ctx.Err() != nil {
			return p, err
		}
		s.log.Debug("sandbox setup raced a host unmount; starting again", logkey.Error, err, "attempt", attempt)
	}
}

// setupAttempts bounds the starts of one command that lose errMountRace.
const setupAttempts = 3

// errMountRace is bwrap failing its setup because a mount beneath the
// host's / went away while it remounted the tree read-only: `--ro-bind /
// /` binds every host mount, then remounts each one it listed, and a
// mount unmounted in between (another sandbox's disk, any FUSE or tmpfs
// mount of the host) is gone by then. Nothing ran yet, so starting again
// is safe.
var errMountRace = errors.New("a host mount vanished during sandbox setup")

// mountRaced reports whether bwrap's stderr is errMountRace's.
func mountRaced(stderr string) bool {
	return (strings.Contains(stderr, "Unable to apply mount flags") || strings.Contains(stderr, "Can't remount readonly")) &&
		(strings.Contains(stderr, "No such file or directory") || strings.Contains(stderr, "Invalid argument"))
}

func (s *Sandbox) start(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
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
	env := append([]string(nil), c.Env...)
	if !hasEnv(env, "HOME") {
		env = append(env, "HOME="+s.info.Home)
	}

	var cmd *exec.Cmd
	var l *launch
	if s.p.bw == nil {
		cmd = exec.Command(path, c.Args...)
		cmd.Env = append(env, "TMPDIR="+s.tmp)
		cmd.Dir = dir
		// Own process group so Kill reaches grandchildren; Pdeathsig so a
		// runner crash does not leave the harness running.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	} else {
		if s.proxy != nil && s.mode == "allowlist" {
			env = append(env, netstack.ProxyEnv()...)
		}
		var err error
		if l, err = s.p.bw.command(s, path, c.Args, env, dir); err != nil {
			return nil, err
		}
		cmd = l.cmd
	}
	cmd.WaitDelay = c.WaitDelay
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		l.close()
		return nil, err
	}
	// Our own pipe, not cmd.StdoutPipe: Wait runs in the background as soon
	// as the process starts, and StdoutPipe's reader is closed by Wait, so
	// output not yet read would be lost.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		l.close()
		return nil, err
	}
	cmd.Stdout = stdoutW
	defer stdoutW.Close()
	p := &process{cmd: cmd, stdin: stdin, stdout: &eofCloser{f: stdout}, stderr: tailbuf.New(8 << 10), done: make(chan struct{}), cg: s.cg, bwrap: s.p.bw != nil, pidfd: -1}
	cmd.Stderr = p.stderr
	if s.cg != nil {
		p.before = s.cg.Counters()
	}
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		l.close()
		stdout.Close()
		return nil, fmt.Errorf("start in sandbox %s: %w", s.info.ID, errdefs.With(errdefs.ErrConflict, errors.New("sandbox destroyed")))
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		l.close()
		stdout.Close()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	if s.procs == nil {
		s.procs = map[*process]struct{}{}
	}
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	pidfd, err := l.started()
	if err != nil {
		// The sandbox never ran the command: kill bwrap and report why.
		_ = p.kill()
		p.waitErr = cmd.Wait()
		close(p.done) // a concurrent Destroy waits for it
		s.forget(p)
		stdout.Close()
		if stderr := p.stderr.String(); mountRaced(stderr) {
			err = fmt.Errorf("%w (%w)", err, errMountRace)
		}
		return nil, fmt.Errorf("start %s in sandbox %s: %w: %s", path, s.info.ID, err, p.stderr.String())
	}
	p.pidfd = pidfd
	if l != nil {
		p.net = l.net
	}
	if p.net != nil {
		s.log.Debug("process started", logkey.PID, cmd.Process.Pid, "bwrap_setup", p.net.Timings()[0], "slirp4netns", p.net.Timings()[1], "nftables", p.net.Timings()[2])
	} else {
		s.log.Debug("process started", logkey.PID, cmd.Process.Pid)
	}

	go func() {
		if !p.bwrap {
			endGroup(cmd.Process.Pid) // group.go: without a PID namespace the group ends with its leader
		}
		p.waitErr = cmd.Wait()
		p.net.Close() // slirp4netns ends with the sandbox
		if p.cg != nil {
			p.after = p.cg.Counters()
		}
		p.mu.Lock()
		if p.pidfd >= 0 {
			unix.Close(p.pidfd)
			p.pidfd = -1
		}
		p.mu.Unlock()
		close(p.done)
		s.forget(p)
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

func (s *Sandbox) forget(p *process) {
	s.mu.Lock()
	delete(s.procs, p)
	s.mu.Unlock()
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// lookPath resolves name against the PATH of the process's own environment,
// not the runner's. The sandbox sees the host's root, so a host lookup finds
// what the sandbox would find.
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
	stderr  *tailbuf.Buffer
	done    chan struct{}
	waitErr error
	bwrap   bool
	cg      *cgroup.Group
	net     *netstack.Attachment // nil unless network "on" is isolated
	// mu guards pidfd, bwrap's sandbox init; -1 when there is none.
	mu    sync.Mutex
	pidfd int
	// before and after are the cgroup's limit events around the process.
	before, after cgroup.Counters
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
	return p.kill()
}

// kill sends SIGKILL. With bwrap it goes to the sandbox's init: the kernel
// then kills everything in its pid namespace, and bwrap, which waits for
// the init, reaps it and exits. (Killing bwrap instead would orphan the
// init, which arms its own parent-death signal only after the command
// started, and leave a zombie for whatever reaps orphans.) Otherwise, and
// for a bwrap that never got that far, it goes to the process group.
func (p *process) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidfd >= 0 {
		// ESRCH: it is already gone, which is what was asked.
		_ = unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0)
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

func (p *process) Wait() error {
	<-p.done
	err := exitError(p.waitErr, p.bwrap)
	var ee *sandbox.ExitError
	if errors.As(err, &ee) {
		ee.Reason = p.after.Reason(p.before)
	}
	return err
}

func exitError(err error, bwrap bool) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	out := &sandbox.ExitError{Code: ee.ExitCode()}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		out.Code = -1
		out.Signal = unix.SignalName(ws.Signal())
	} else if bwrap && out.Code > 128 && out.Code < 128+32 {
		// bwrap reports a command killed by signal n as exit code 128+n.
		out.Code = -1
		out.Signal = unix.SignalName(syscall.Signal(ee.ExitCode() - 128))
	}
	return out
}

// eofCloser closes the read end of the stdout pipe once it is drained, so
// a consumer that reads to EOF leaks no descriptor.
type eofCloser struct {
	mu sync.Mutex
	f  *os.File
}

func (e *eofCloser) Read(b []byte) (int, error) {
	e.mu.Lock()
	f := e.f
	e.mu.Unlock()
	if f == nil {
		return 0, io.EOF
	}
	n, err := f.Read(b)
	if err == io.EOF {
		e.mu.Lock()
		if e.f != nil {
			e.f.Close()
			e.f = nil
		}
		e.mu.Unlock()
	}
	return n, err
}
