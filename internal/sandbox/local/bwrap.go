package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local/cgroup"
	"github.com/agentrunner/runner/internal/sandbox/local/netstack"
	"github.com/agentrunner/runner/internal/sandbox/local/seccomp"
)

// bwrapNamespaces are the namespaces every sandbox gets. The network
// namespace is added per sandbox (network mode "off" and "allowlist").
// --cap-drop ALL matters when the runner is root: bwrap then keeps the
// caller's capabilities by default, and a process with CAP_SYS_ADMIN in its
// own user namespace could unmount the masks below. --new-session keeps the
// sandbox away from a terminal the runner may have (the seccomp filter also
// refuses TIOCSTI).
var bwrapNamespaces = []string{
	"--die-with-parent", "--new-session",
	"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup",
	"--disable-userns", "--cap-drop", "ALL", "--hostname", "sandbox",
}

// bwrapNamespacesRunAs replace bwrapNamespaces with Config.SandboxUID: the
// runner makes the user namespace itself (user.go), so bwrap must not, and
// keeps only what setpriv needs to switch to the sandbox user; the switch
// clears those too.
var bwrapNamespacesRunAs = []string{
	"--die-with-parent", "--new-session",
	"--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup",
	"--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--hostname", "sandbox",
}

// alwaysHidden are host paths no sandbox sees. /run holds sockets (docker,
// dbus) that a read-only mount does not stop a process from connecting to,
// and container secrets (/run/secrets, the Kubernetes service account).
// The /etc entries are readable only by root; a runner running as root runs
// its sandboxes as root's uid (in their own user namespace), which file
// permissions do not stop, so the best-known of them are masked too.
var alwaysHidden = []string{
	"/root", "/run", "/var/run/secrets",
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/ssh", "/etc/sudoers", "/etc/sudoers.d",
}

// reexposed are files programs need whose symlink targets may lie in a
// hidden path.
var reexposed = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/localtime"}

// bwrap holds what every bubblewrap launch shares, computed once in New.
type bwrap struct {
	path    string
	base    []string // namespaces, root, /dev, /proc
	masks   []string // applied after the private /tmp
	hidden  []string // host paths that are not visible inside
	seccomp []byte   // the BPF program, struct sock_filter[]
	bridge  []string // Config.ProxyBridge
	user    *runAs   // nil: sandboxes run as the runner's uid
}

func newBwrap(cfg Config) (*bwrap, error) {
	name := cfg.Bwrap
	if name == "" {
		name = "bwrap"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("bubblewrap binary: %w", err)
	}
	prog, err := seccomp.Program()
	if err != nil {
		return nil, err
	}
	if err := cloexecInherited(); err != nil {
		return nil, err
	}
	b := &bwrap{path: path, seccomp: prog, bridge: cfg.ProxyBridge}
	ns := bwrapNamespaces
	if b.user, err = newRunAs(cfg); err != nil {
		return nil, err
	}
	if b.user != nil {
		ns = bwrapNamespacesRunAs
	}
	b.base = append(append([]string(nil), ns...),
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")

	hide := append([]string(nil), alwaysHidden...)
	if home, err := os.UserHomeDir(); err == nil && home != "/" {
		hide = append(hide, home)
	}
	hide = append(hide, cfg.DataDir, cfg.Dir)
	hide = append(hide, cfg.Hide...)
	var reals []string
	for _, h := range hide {
		if !filepath.IsAbs(h) || h == "/" {
			continue
		}
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			continue // nothing there to hide
		}
		b.hidden = append(b.hidden, h, real)
		reals = append(reals, real)
	}
	seen := map[string]bool{}
	for _, real := range reals {
		if seen[real] || within(real, "/tmp") || coveredByOther(real, reals) {
			continue // the private /tmp or another mask already covers it
		}
		seen[real] = true
		st, err := os.Stat(real)
		if err != nil {
			continue
		}
		if st.IsDir() {
			b.masks = append(b.masks, "--tmpfs", real)
		} else {
			b.masks = append(b.masks, "--ro-bind", "/dev/null", real)
		}
	}
	b.masks = append(b.masks, sysMasks()...)
	// Files that ordinary programs need may be symlinks into a hidden
	// path (/etc/resolv.conf into /run on most distributions): their
	// targets are put back, read-only.
	for _, f := range reexposed {
		if target, err := filepath.EvalSymlinks(f); err == nil && target != f && coveredByOther(target, reals) {
			b.masks = append(b.masks, "--ro-bind", target, target)
		}
	}
	return b, nil
}

// coveredByOther reports whether path lies within one of dirs other than
// itself.
func coveredByOther(path string, dirs []string) bool {
	for _, d := range dirs {
		if d != path && within(path, d) {
			return true
		}
	}
	return false
}

// cloexecInherited marks every descriptor above stderr close-on-exec.
// Go opens all of its own that way, but descriptors the runner inherited
// from whatever started it are not, and neither exec nor bwrap closes them
// for the sandboxed command: they would leak into every sandbox.
func cloexecInherited() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC.
	ents, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", errors.Join(err, rerr))
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// sandboxArgs are the arguments shared by every process of one sandbox.
func (b *bwrap) sandboxArgs(s *Sandbox) []string {
	args := append([]string(nil), b.base...)
	if s.mode != "on" || s.isolated() {
		args = append(args, "--unshare-net")
	}
	args = append(args, "--bind", s.tmp, "/tmp")
	args = append(args, b.masks...)
	args = append(args, cgroupBinds(s.cg)...)
	if s.isolated() {
		// The host's resolver may be on its loopback (systemd-resolved,
		// Docker's 127.0.0.11), which the sandbox does not reach.
		if target, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil {
			resolv := s.p.net.ResolvConf(s.mode == "allowlist")
			args = append(args, "--ro-bind", resolv, target)
		}
	}
	work := "--bind"
	if s.spec.ReadOnly {
		work = "--ro-bind"
	}
	args = b.bind(args, work, s.info.Workdir)
	args = b.bind(args, work, sandbox.AgentDir(s.info)) // the agent's shared folder, beside the workdir
	args = b.bind(args, "--bind", s.info.Home)
	for _, bd := range s.spec.Binds {
		flag := "--ro-bind"
		if bd.Writable {
			flag = "--bind"
		}
		args = b.bind(args, flag, bd.Path)
	}
	if s.dns != nil {
		args = b.bind(args, "--ro-bind", s.dns.Path())
	}
	if s.proxy != nil {
		args = b.bind(args, "--ro-bind", s.proxy.Path())
		args = b.expose(args, s, b.bridge[0])
	}
	return args
}

// bind binds the host path at the same path inside. bwrap creates missing
// parents of a file mount point readable by its owner only, which is fine
// while the sandbox runs as that owner; for a sandbox user they are made
// first, world-readable.
func (b *bwrap) bind(args []string, flag, path string) []string {
	if b.user != nil {
		args = append(args, "--dir", filepath.Dir(path))
	}
	return append(args, flag, path, path)
}

// expose binds the host file path read-only at the same path when the
// sandbox would not see it otherwise, e.g. a harness or a test binary
// under the host's /tmp.
func (b *bwrap) expose(args []string, s *Sandbox, path string) []string {
	if !b.visible(s, path) {
		args = b.bind(args, "--ro-bind", path)
	}
	return args
}

func (b *bwrap) visible(s *Sandbox, path string) bool {
	if within(path, s.info.Workdir) || within(path, s.info.Home) {
		return true
	}
	for _, bd := range s.spec.Binds {
		if within(path, bd.Path) {
			return true
		}
	}
	for _, h := range append([]string{"/tmp", "/dev", "/proc"}, b.hidden...) {
		if within(path, h) {
			return false
		}
	}
	return true
}

// launch is one bwrap invocation being started.
type launch struct {
	cmd      *exec.Cmd
	child    []*os.File // the child's ends, closed once it started
	info     *os.File   // bwrap writes {"child-pid": n} here
	block    *os.File   // the sandbox waits for a byte here (--block-fd)
	attach   func(pid int) (*netstack.Attachment, error)
	net      *netstack.Attachment // what attach made; the process owns it
	args     *os.File             // bwrap reads its arguments from here (--args)
	argsData []byte
	cg       *cgroup.Group
}

// command builds the bwrap command that runs path in s. Everything but the
// command line travels through --args: the environment is not visible in
// the host's ps, and none of it reaches bwrap's own environment (bwrap runs
// outside the sandbox, so LD_PRELOAD and friends must not).
func (b *bwrap) command(s *Sandbox, path string, argv, env []string, dir string) (*launch, error) {
	args := append([]string(nil), s.args...)
	// Read for each process: a host service's socket appears or moves at
	// any time, and a directory masked at Create may be gone by now.
	args = append(args, b.socketMasks(s)...)
	args = b.expose(args, s, path)
	args = append(args, "--chdir", dir)
	for _, kv := range env {
		k, v, ok := bytes.Cut([]byte(kv), []byte("="))
		if !ok || len(k) == 0 {
			continue
		}
		args = append(args, "--setenv", string(k), string(v))
	}
	l := &launch{cg: s.cg}
	var files []*os.File
	fd := func(f *os.File) string {
		files = append(files, f)
		return strconv.Itoa(2 + len(files))
	}
	sec, err := dataFile("seccomp", b.seccomp)
	if err != nil {
		return nil, err
	}
	l.child = append(l.child, sec)
	args = append(args, "--seccomp", fd(sec))
	ir, iw, err := os.Pipe()
	if err != nil {
		l.close()
		return nil, err
	}
	l.info = ir
	l.child = append(l.child, iw)
	args = append(args, "--info-fd", fd(iw))
	if s.isolated() {
		// The command waits until its network is attached and filtered.
		br, bw, err := os.Pipe()
		if err != nil {
			l.close()
			return nil, err
		}
		l.block = bw
		l.child = append(l.child, br)
		blockFD := fd(br)
		args = append(args, "--block-fd", blockFD)
		l.attach = func(pid int) (*netstack.Attachment, error) {
			pol, seen, err := s.netPolicy()
			if err != nil {
				return nil, err
			}
			a, err := s.p.net.Attach(pid, blockFD, s.root, pol)
			if err == nil && s.dns != nil {
				if err = s.trackNet(a, seen); err != nil {
					a.Close()
					return nil, err
				}
			}
			return a, err
		}
	}
	// The arguments go through a pipe written after the start: bwrap reads
	// them before it makes the sandbox, so on cgroup v1, where a process
	// cannot be started inside a cgroup, there is time to move bwrap in
	// first and everything it forks is born there.
	ar, aw, err := os.Pipe()
	if err != nil {
		l.close()
		return nil, err
	}
	l.args = aw
	l.child = append(l.child, ar)
	for _, a := range args {
		l.argsData = append(append(l.argsData, a...), 0)
	}
	line := []string{"--args", fd(ar), "--"}
	if b.user != nil {
		line = append(line, b.user.setpriv...)
	}
	if s.proxy != nil {
		line = append(line, b.bridge...)
		listen := netstack.ProxyListen
		if s.mode == "on" {
			listen = "-" // forwards only; no HTTP proxy
		}
		line = append(line, s.proxy.Path(), listen)
		for _, addr := range s.forwards {
			line = append(line, "--forward", addr)
		}
		if s.dns != nil {
			line = append(line, "--dns", s.dns.Path())
		}
		line = append(line, "--")
	}
	line = append(line, path)
	line = append(line, argv...)

	cmd := exec.Command(b.path, line...)
	cmd.Env = []string{} // not nil: nil would inherit the runner's environment
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if b.user != nil {
		b.user.userns(cmd.SysProcAttr)
	}
	if s.cg != nil {
		if cfd, ok := s.cg.FD(); ok {
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = cfd
		}
	}
	l.cmd = cmd
	return l, nil
}

// started finishes a launch after cmd.Start: it closes the child's ends,
// moves bwrap into the sandbox's cgroup on v1, hands bwrap its arguments,
// and learns bwrap's sandbox init (the pid namespace's pid 1), returning a
// pidfd for it that the caller owns.
func (l *launch) started() (pidfd int, err error) {
	if l == nil {
		return -1, nil
	}
	for _, f := range l.child {
		f.Close()
	}
	l.child = nil
	defer l.close()
	if l.cg != nil && l.cg.NeedsPid() {
		if err := l.cg.Add(l.cmd.Process.Pid); err != nil {
			return -1, fmt.Errorf("move the sandbox into its cgroup: %w", err)
		}
	}
	if _, err := l.args.Write(l.argsData); err != nil {
		return -1, errors.New("bwrap exited before reading its arguments")
	}
	l.args.Close()
	l.args = nil
	// One JSON object, not to EOF: with --block-fd the sandbox keeps its
	// copy of the descriptor open until it is released.
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(l.info).Decode(&info); err != nil || info.ChildPID == 0 {
		return -1, errors.New("bwrap exited during setup")
	}
	// The init cannot be reaped and its pid reused while bwrap, which
	// waits for it, lives; the pidfd pins it after that.
	pidfd, err = unix.PidfdOpen(info.ChildPID, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd of the sandbox init: %w", err)
	}
	if l.attach != nil {
		net, err := l.attach(info.ChildPID)
		if err != nil {
			// Killed before the block is lifted: closing it unreleased
			// would let the command run without its table.
			_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			unix.Close(pidfd)
			return -1, fmt.Errorf("network \"on\": %w", err)
		}
		if _, err := l.block.Write([]byte{1}); err != nil {
			net.Close()
			unix.Close(pidfd)
			return -1, errors.New("bwrap exited before its network was attached")
		}
		l.net = net
	}
	return pidfd, nil
}

// close releases every file of a launch that did not start; nil-safe.
func (l *launch) close() {
	if l == nil {
		return
	}
	for _, f := range append(l.child, l.info, l.args, l.block) {
		if f != nil {
			f.Close()
		}
	}
	l.child, l.info, l.args, l.block = nil, nil, nil, nil
}

// dataFile returns a file positioned at the start of data, for bwrap to
// read from an inherited descriptor.
func dataFile(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	return f, nil
}

// probe runs a trivial sandbox with network "off" through the full setup
// (namespaces, masks, seccomp, cgroup), so New fails now instead of every
// turn failing later.
func (p *Provider) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The trivial sandbox's bwrap can lose the race with a host unmount
	// (errMountRace) after its start was reported, in its wait: such a
	// loss says nothing of the host, so it is tried again.
	for attempt := 1; ; attempt++ {
		err := p.probeOnce(ctx)
		if err == nil || attempt == setupAttempts || !mountRaced(err.Error()) || ctx.Err() != nil {
			return err
		}
		p.log.Debug("bwrap probe raced a host unmount; trying again", logkey.Error, err, "attempt", attempt)
	}
}

func (p *Provider) probeOnce(ctx context.Context) error {
	sb, err := p.Create(ctx, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
	if err != nil {
		return err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	path, args := "/bin/true", []string(nil)
	if _, err := os.Stat(path); err != nil {
		path, args = p.bw.path, []string{"--version"}
	}
	proc, err := sb.Start(ctx, sandbox.Cmd{Path: path, Args: args})
	if err != nil {
		return err
	}
	if err := proc.Wait(); err != nil {
		if tail := proc.StderrTail(); tail != "" {
			return fmt.Errorf("a trivial sandbox failed: %s", tail)
		}
		return fmt.Errorf("a trivial sandbox failed: %w", err)
	}
	return nil
}
