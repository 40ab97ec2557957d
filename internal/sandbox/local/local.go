package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/sandbox/local/cgroup"
	"github.com/agentrunner/runner/internal/sandbox/local/netstack"
)

// Isolation values for Config.Isolation.
const (
	IsolationBwrap = "bwrap"
	IsolationNone  = "none"
)

// Limit defaults; NoLimit in a Config field turns that limit off.
const (
	DefaultMemoryMB  = 4096
	DefaultPids      = 1024
	NoLimit          = -1
	DefaultDiskMB    = 4096
	DefaultReserveMB = 512
)

// DefaultCPUs is the CPU limit of a sandbox when none is configured: half
// the host's CPUs, at least one, so no single sandbox takes the whole host;
// under contention sandboxes share by equal weight (package cgroup).
func DefaultCPUs() float64 { return max(1, float64(runtime.NumCPU())/2) }

// Config configures the local provider. The zero value of every field but
// Dir picks a default.
type Config struct {
	// Dir is where sandbox directories are created (<data dir>/sandboxes);
	// state kept under a Spec.StateKey lives in Dir/state.
	Dir string
	// DataDir is the runner's data dir; with bwrap it is hidden from every
	// sandbox except for the sandbox's own directories. Empty means Dir.
	DataDir string
	// Isolation is "bwrap" (default) or "none" (host process).
	Isolation string
	// Bwrap is the bubblewrap binary; empty means "bwrap" looked up in PATH.
	Bwrap string
	// Hide lists more host paths that sandboxes must not see: every path
	// the runner owns (config.Config.RunnerPaths), its config files,
	// credentials. DataDir, the runner's home and the paths in
	// alwaysHidden (bwrap.go) are always hidden.
	Hide []string
	// MemoryMB, Pids and CPUs limit each bwrap sandbox (all its processes
	// together; CPUs is a quota in CPUs, plus an equal weight). Zero means
	// the default, NoLimit means no limit. They need
	// a writable cgroup; New fails when one is asked for and there is none.
	MemoryMB int
	Pids     int
	CPUs     float64
	// ProxyBridge is the argv prefix of the in-sandbox bridge that network
	// mode "allowlist" needs: a host executable that runs ProxyBridgeMain
	// with the arguments appended to it, e.g. {"/usr/bin/runner",
	// "sandbox-proxy-bridge"}. Without it "allowlist" is refused.
	ProxyBridge []string
	// SandboxUID and SandboxGID, when the runner runs as root, make sandbox
	// processes run as this host user (and group; zero means the uid)
	// instead of root's uid, so root-only files stay unreadable. The
	// sandbox's directories and what WriteFile writes are given to it;
	// anything else put into a workspace must be too, and unix sockets in
	// Spec.Binds must be connectable by it. Needs setpriv (util-linux).
	SandboxUID int
	SandboxGID int
	// Network is how network "on" reaches out: NetworkIsolated (the
	// default: slirp4netns and an nftables table, package netstack) or
	// NetworkHost (the host's network namespace).
	Network string
	// NetAllow are destinations network "on" reaches besides the
	// public internet: CIDRs, addresses, host:port (names are resolved
	// once, in New; loopback host:port is served on the sandbox's own
	// loopback).
	NetAllow []string
	// Egress is the refused-range policy every dial for a sandbox and the
	// isolated network's table follow; nil: one built from NetAllow (the
	// runner passes its own, which also knows its listeners).
	Egress *egress.Policy
	// Slirp4netns and Nsenter are those binaries; empty means looked up in
	// PATH.
	Slirp4netns string
	Nsenter     string
	// TunDevice is the tun device slirp4netns opens; empty means
	// /dev/net/tun.
	TunDevice string
	// DiskMB caps each bwrap sandbox's writable directories (workspace,
	// $HOME, /tmp) with an image of that size (disk_linux.go); zero means
	// DefaultDiskMB, NoLimit none. ReserveMB is the free space the
	// sandboxes' disks may never take from Dir's filesystem together (zero:
	// DefaultReserveMB; NoLimit: none).
	DiskMB    int
	ReserveMB int
	Logger    *slog.Logger
}

// limitsOf is what each sandbox's cgroup enforces.
func limitsOf(cfg Config) cgroup.Limits {
	return cgroup.Limits{MemoryBytes: int64(cfg.MemoryMB) << 20, Pids: int64(cfg.Pids), CPUs: cfg.CPUs}
}

// Provider creates local sandboxes.
type Provider struct {
	cfg Config
	log *slog.Logger
	bw  *bwrap         // nil with isolation "none"
	cg  *cgroup.Parent // nil when no limit is asked for or with isolation "none"
	// net is the isolated network of mode "on"; nil with NetworkHost, or
	// when it cannot work here, and then netErr says why.
	net    *netstack.Stack
	netErr error
	// notifier follows the durable trees of its sandboxes (WatchTree).
	notifier filetree.Notifier
	disk     *disk // nil without a disk quota or with isolation "none"
}

var (
	_ sandbox.Provider     = (*Provider)(nil)
	_ sandbox.Describer    = (*Provider)(nil)
	_ sandbox.Readier      = (*Provider)(nil)
	_ sandbox.StateRemover = (*Provider)(nil)
	_ sandbox.Sandbox      = (*Sandbox)(nil)
)

// New returns a local provider. With isolation "bwrap" it checks once that
// bubblewrap, the seccomp filter and the cgroup limits work on this host and
// fails with the cause and the ways out otherwise; it never falls back to a
// weaker isolation.
func New(cfg Config) (*Provider, error) {
	if os.Getenv(netstack.SetupEnv) == "1" {
		return nil, fmt.Errorf("this process was started as a sandbox's network installer (%s) but its main did not dispatch that to local.NetSetupMain", NetSetupCommand)
	}
	if cfg.Isolation == "" {
		cfg.Isolation = IsolationBwrap
	}
	if cfg.Isolation != IsolationBwrap && cfg.Isolation != IsolationNone {
		return nil, errdefs.Invalidf("local isolation %q: want %q or %q", cfg.Isolation, IsolationBwrap, IsolationNone)
	}
	if cfg.Dir == "" {
		return nil, errdefs.Invalidf("local sandbox dir is empty")
	}
	if cfg.Egress == nil {
		var err error
		if cfg.Egress, err = egress.New(cfg.NetAllow); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox dir: %w", err)
	}
	// Resolve symlinks now: bwrap masks and binds real paths.
	dir, err := filepath.EvalSymlinks(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("local sandbox dir: %w", err)
	}
	cfg.Dir = dir
	if cfg.DataDir == "" {
		cfg.DataDir = cfg.Dir
	} else if d, err := filepath.EvalSymlinks(cfg.DataDir); err == nil {
		cfg.DataDir = d
	}
	cfg.MemoryMB = orDefault(cfg.MemoryMB, DefaultMemoryMB)
	cfg.Pids = orDefault(cfg.Pids, DefaultPids)
	cfg.DiskMB = orDefault(cfg.DiskMB, DefaultDiskMB)
	cfg.ReserveMB = orDefault(cfg.ReserveMB, DefaultReserveMB)
	if cfg.CPUs == 0 {
		cfg.CPUs = DefaultCPUs()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Provider{cfg: cfg, log: log}
	if cfg.Isolation == IsolationNone {
		log.Info("local sandboxes are unconfined host processes (AGENTA_RUNNER_LOCAL_ISOLATION=none); for development only")
		return p, nil
	}
	bwrapErr := func(err error) error { return bwrapUnavailable(err, procFiles) }
	if p.bw, err = newBwrap(cfg); err != nil {
		return nil, bwrapErr(err)
	}
	if err := p.newNetwork(); err != nil {
		return nil, err
	}
	instance := sha256.Sum256([]byte(cfg.Dir))
	if p.cg, err = cgroup.New(limitsOf(cfg), hex.EncodeToString(instance[:6])); err != nil {
		return nil, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("local sandbox limits: %w; give the runner a writable cgroup (root on the host; in a container, /sys/fs/cgroup mounted writable, or a delegated cgroup v2 subtree), or turn the limits off with AGENTA_RUNNER_LOCAL_MEMORY_MB=0 AGENTA_RUNNER_LOCAL_PIDS=0 AGENTA_RUNNER_LOCAL_CPUS=0", err))
	}
	if cfg.DiskMB > 0 {
		if p.disk, err = newDisk(cfg); err != nil {
			return nil, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("local sandbox disk quota (AGENTA_RUNNER_LOCAL_DISK_MB=%d): %w; the runner caps each sandbox with a loop-mounted ext4 image, which needs root (CAP_SYS_ADMIN), /dev/loop-control and mkfs.ext4; or run without disk quotas with AGENTA_RUNNER_LOCAL_DISK_MB=0", cfg.DiskMB, err))
		}
	}
	if err := p.probe(context.Background()); err != nil {
		return nil, bwrapErr(err)
	}
	return p, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return "local" }

// Ready implements sandbox.Readier: a turn with the default network mode,
// "on", is refused while the isolated network cannot start here.
func (p *Provider) Ready() error {
	if p.bw != nil && p.net == nil && p.netErr != nil {
		return fmt.Errorf("local sandboxes cannot run the default network mode \"on\": %w (give the runner /dev/net/tun and slirp4netns — in Kubernetes the chart's agentRunner.localSandbox.tun —, or set AGENTA_RUNNER_LOCAL_NETWORK=host for development only)", p.netErr)
	}
	return nil
}

// Describe implements sandbox.Describer.
func (p *Provider) Describe() map[string]any {
	d := map[string]any{"isolation": p.cfg.Isolation}
	if p.bw == nil {
		return d
	}
	d["bwrap"] = p.bw.path
	if p.bw.user != nil {
		d["sandbox_uid"] = p.bw.user.uid
	}
	d["seccomp"] = true
	d["network"] = []string{"on", "off", "allowlist"}
	d["network_on"] = p.networkOn()
	// Limits that are off are left out.
	limits := map[string]any{}
	if p.cfg.MemoryMB > 0 {
		limits["memory_mb"] = p.cfg.MemoryMB
	}
	if p.cfg.Pids > 0 {
		limits["pids"] = p.cfg.Pids
	}
	if p.cfg.CPUs > 0 {
		limits["cpus"] = p.cfg.CPUs
	}
	if p.cg != nil {
		limits["cgroup"] = p.cg.Version()
	}
	if p.disk != nil {
		limits["disk_mb"] = p.cfg.DiskMB
		limits["disk_reserve_mb"] = max(0, p.cfg.ReserveMB)
	}
	d["limits"] = limits
	return d
}

// Create implements sandbox.Provider.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	mode := spec.Network.Mode
	if mode == "" {
		mode = "on"
	}
	switch mode {
	case "on", "off", "allowlist":
	default:
		return nil, errdefs.Invalidf("sandboxPermission.network.mode %q: want on, off or allowlist", mode)
	}
	if p.bw == nil && mode != "on" {
		return nil, errdefs.Unprocessablef("sandboxPermission.network.mode %q needs local isolation; the local provider runs with AGENTA_RUNNER_LOCAL_ISOLATION=none", mode)
	}
	if p.bw == nil && spec.ReadOnly {
		return nil, errdefs.Unprocessablef("sandboxPermission.filesystem \"readonly\" needs local isolation; the local provider runs with AGENTA_RUNNER_LOCAL_ISOLATION=none")
	}
	if mode == "allowlist" && len(p.cfg.ProxyBridge) == 0 {
		return nil, errdefs.Unprocessablef("sandboxPermission.network.mode \"allowlist\" needs the local proxy bridge, which this runner was built without")
	}
	if p.bw != nil && mode == "on" && p.netErr != nil {
		return nil, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("sandboxPermission.network.mode \"on\" is refused: its isolated network does not work on this host: %w (or set AGENTA_RUNNER_LOCAL_NETWORK=host to share the host's network, for development only)", p.netErr))
	}
	// The runner's own services are listed too: the proxy admits them by
	// name, and its dialer lets them through the refused ranges.
	allow, err := netstack.ParseAllowlist(append(slices.Clone(spec.Network.Allow), spec.Network.Runner...))
	if err != nil {
		return nil, err
	}
	for _, b := range spec.Binds {
		if !filepath.IsAbs(b.Path) {
			return nil, errdefs.Invalidf("sandbox bind %q: not an absolute path", b.Path)
		}
		if _, err := os.Lstat(b.Path); err != nil {
			return nil, errdefs.With(errdefs.ErrInvalid, fmt.Errorf("sandbox bind: %w", err))
		}
	}

	if spec.Workdir != "" {
		if !filepath.IsAbs(spec.Workdir) {
			return nil, errdefs.Invalidf("sandbox workdir %q: not an absolute path", spec.Workdir)
		}
		if st, err := os.Stat(spec.Workdir); err != nil || !st.IsDir() {
			return nil, errdefs.Invalidf("sandbox workdir %q: not a directory", spec.Workdir)
		}
	}

	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "local-" + hex.EncodeToString(b[:])
	root := filepath.Join(p.cfg.Dir, id)
	base := root
	if spec.StateKey != "" {
		base = p.stateDir(spec.StateKey)
	} else if p.disk != nil {
		base = filepath.Join(root, "disk")
	}
	tmp := filepath.Join(root, "tmp")
	if p.disk != nil {
		// On the capped disk, one per sandbox: a state dir's disk may be
		// shared for a moment by the sandbox that ends and the next.
		tmp = filepath.Join(base, "tmp-"+id)
		if err := os.MkdirAll(root, 0o700); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", id, err)
		}
		if err := p.disk.acquire(ctx, base); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	work, home := filepath.Join(base, "work"), filepath.Join(base, "home")
	agent := ""
	if spec.Workdir != "" {
		// The caller's own directory: never created, chowned or removed
		// here, and nothing is put beside it.
		work, agent = spec.Workdir, filepath.Join(base, "work-agent")
	}
	sb := &Sandbox{
		p:    p,
		root: root,
		base: base,
		tmp:  tmp,
		mode: mode,
		spec: spec,
		info: sandbox.Info{
			ID:        id,
			Provider:  "local",
			Workdir:   work,
			Home:      home,
			Isolation: p.cfg.Isolation,
			AgentDir:  agent,
		},
		log: p.log.With(logkey.Sandbox, id),
	}
	// bwrap binds the sandbox's directories at their host paths, so the
	// paths inside equal the paths outside and callers need no translation.
	sb.info.HostWorkdir = sb.info.Workdir
	for _, d := range []string{sb.info.Workdir, sandbox.AgentDir(sb.info), sb.info.Home, tmp} {
		if d == spec.Workdir {
			continue
		}
		err := os.MkdirAll(d, 0o700)
		if err == nil {
			err = p.user().ownDir(d, d == tmp)
		}
		if err != nil {
			sb.teardown()
			return nil, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	if p.cg != nil {
		if sb.cg, err = p.cg.Create(id); err != nil {
			sb.teardown()
			return nil, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	if mode == "allowlist" {
		if err := sb.startProxy(allow); err != nil {
			sb.teardown()
			return nil, err
		}
	}
	if err := sb.openNetwork(); err != nil { // names the sandbox
		sb.teardown()
		return nil, err
	}
	if p.bw != nil {
		sb.args = p.bw.sandboxArgs(sb)
	}
	sb.log.Debug("sandbox created", "network", mode, "readonly", spec.ReadOnly)
	return sb, nil
}

// startProxy starts the sandbox's host-side proxy, admitting allow.
func (s *Sandbox) startProxy(allow *netstack.Allowlist) error {
	sock := filepath.Join(s.root, "proxy.sock")
	if len(sock) > 107 { // sun_path
		return errdefs.Unprocessablef("network mode %s: the proxy socket path %s is longer than a unix socket allows (108 bytes); use a shorter AGENTA_RUNNER_DATA_DIR", s.mode, sock)
	}
	var err error
	var runner []netip.AddrPort
	for _, r := range s.spec.Network.Runner {
		ap, err := netip.ParseAddrPort(r)
		if err != nil {
			return fmt.Errorf("create sandbox %s: runner service %q: not ip:port: %w", s.info.ID, r, err)
		}
		runner = append(runner, ap)
	}
	s.proxy, err = netstack.StartProxy(sock, allow, s.p.cfg.Egress.ControlExcept(runner), s.log, s.spec.OnEvent)
	if err == nil {
		err = s.p.user().own(s.proxy.Path())
	}
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.info.ID, err)
	}
	return nil
}

// user is the sandbox user, nil when sandboxes run as the runner's uid.
func (p *Provider) user() *runAs {
	if p.bw == nil {
		return nil
	}
	return p.bw.user
}

// stateDir is where the workspace and $HOME of a Spec.StateKey live. The key
// is hashed: it comes from callers ("project:session") and must not steer
// the path.
func (p *Provider) stateDir(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(p.cfg.Dir, "state", hex.EncodeToString(sum[:16]))
}

// RemoveState implements sandbox.StateRemover: it deletes the workspace and
// $HOME kept under key. Removing state that does not exist is not an error.
func (p *Provider) RemoveState(ctx context.Context, key string) error {
	if key == "" {
		return errdefs.Invalidf("remove sandbox state: empty key")
	}
	if p.disk != nil {
		if err := p.disk.remove(p.stateDir(key)); err != nil {
			return fmt.Errorf("remove sandbox state: %w", err)
		}
	}
	if err := os.RemoveAll(p.stateDir(key)); err != nil {
		return fmt.Errorf("remove sandbox state: %w", err)
	}
	return nil
}

// Sandbox is one local sandbox.
type Sandbox struct {
	p     *Provider
	root  string
	base  string // holds work and home; the disk's mount point with a quota
	tmp   string // the sandbox's /tmp
	mode  string // network mode
	spec  sandbox.Spec
	info  sandbox.Info
	log   *slog.Logger
	cg    *cgroup.Group   // nil without limits
	proxy *netstack.Proxy // mode "allowlist"; mode "on" when it forwards to the host's loopback
	args  []string        // the bwrap arguments shared by every process
	// open and openTo are what Spec.Network.Allow opens under mode "on".
	open   []netip.Prefix
	openTo []netip.AddrPort
	// forwards are the host loopback addresses the proxy bridge serves on
	// the sandbox's own loopback: the request's, and under mode "on" the
	// operator's (AGENTA_RUNNER_LOCAL_NETWORK_ALLOW).
	forwards []string
	dns      *netstack.DNSForwarder // mode "allowlist" with an isolated network

	// mu guards the following.
	mu        sync.Mutex
	procs     map[*process]struct{}
	destroyed bool
	// nets are the live processes' networks, resolved what the DNS
	// forwarder opened so far (mode "allowlist").
	nets     map[*netstack.Attachment]struct{}
	resolved []netip.Addr
}

// Info implements sandbox.Sandbox.
func (s *Sandbox) Info() sandbox.Info { return s.info }

// WriteFile implements sandbox.Sandbox. The file is written beneath the
// workdir or home without following a link the agent planted: one at path
// is replaced by the file, one among its parents refuses the write.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	base := s.info.Workdir
	if !within(path, base) {
		base = s.info.Home
	}
	rel, err := filepath.Rel(base, filepath.Clean(path))
	if err != nil || !within(path, base) || rel == "." {
		return errdefs.Invalidf("write %s: outside the sandbox's workdir and home", path)
	}
	if mode == 0 {
		mode = 0o644
	}
	if err := filetree.WriteFile(base, filepath.ToSlash(rel), bytes.NewReader(data), mode, 0o755, s.owner()); err != nil {
		return fmt.Errorf("sandbox %s: %w", s.info.ID, err)
	}
	return nil
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
	// Bounded even when ctx is already cancelled: a client that went away
	// must not leave processes behind.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-wctx.Done():
		}
	}
	return s.teardown()
}

// teardown frees what Create made; it is safe to call more than once.
func (s *Sandbox) teardown() error {
	var errs []error
	if s.proxy != nil {
		s.proxy.Close()
	}
	if s.dns != nil {
		s.dns.Close()
	}
	netstack.ReapSlirps(s.root)
	if s.cg != nil {
		if err := s.cg.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.p.disk != nil && s.tmp != "" {
		if err := os.RemoveAll(s.tmp); err != nil {
			errs = append(errs, err)
		}
		if err := s.p.disk.release(s.base, s.spec.StateKey == ""); err != nil {
			errs = append(errs, err)
		}
		s.tmp = "" // released once
	}
	if err := os.RemoveAll(s.root); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.info.ID, err)
	}
	return nil
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
