package local

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// Values of Config.Network.
const (
	// NetworkIsolated gives every sandbox with network "on" its own network
	// namespace, user-mode networking (slirp4netns) and an nftables table
	// that refuses the host and private networks.
	NetworkIsolated = "isolated"
	// NetworkHost shares the host's network namespace with network "on"
	// sandboxes, for development: they reach the host's loopback.
	NetworkHost = "host"
)

// netstack is the isolated network of mode "on": slirp4netns for the
// traffic, and the NetSetup installer for the table. Each bwrap launch gets
// its own network namespace, so each gets its own slirp4netns.
//
// Nothing of it needs privilege in the host's namespaces. bwrap makes the
// sandbox's user and network namespaces as the runner's uid, which owns
// them; slirp4netns joins them by path, and nsenter runs the installer in
// them as the user namespace's root, with CAP_NET_ADMIN there only. The
// sandbox's own processes live in a nested user namespace bwrap makes
// (--disable-userns) and hold no capability in the one that owns their
// network namespace, so they cannot change the table.
type netstack struct {
	slirp   string
	nsenter string
	setup   string // the installer: this binary, run as NetSetupCommand
	resolv  string // the sandbox's /etc/resolv.conf, naming slirp's DNS
	// resolvAllow names the runner's DNS forwarder (network "allowlist").
	resolvAllow string
	allow       []netip.Prefix
	allowTo     []netip.AddrPort
	// forwards are operator entries on the host's loopback, served on the
	// sandbox's own loopback by the proxy bridge.
	forwards []string
}

// check finds what mode "on" needs, for an n whose allow entries are
// parsed. Its error names the cause and the fix; the provider keeps it and
// refuses every "on" sandbox with it.
func (n *netstack) check(cfg Config) error {
	var err error
	slirp := cfg.Slirp4netns
	if slirp == "" {
		slirp = "slirp4netns"
	}
	if n.slirp, err = exec.LookPath(slirp); err != nil {
		return fmt.Errorf("slirp4netns not found (%w); install the slirp4netns package (apt-get install slirp4netns)", err)
	}
	nsenter := cfg.Nsenter
	if nsenter == "" {
		nsenter = "nsenter"
	}
	if n.nsenter, err = exec.LookPath(nsenter); err != nil {
		return fmt.Errorf("nsenter not found (%w); install util-linux", err)
	}
	// The installer is this very binary (see init in netrules.go). Not by
	// /proc/<pid>/exe: inside the sandbox's user namespace the installer may
	// not look into the runner's /proc.
	if n.setup, err = os.Executable(); err == nil {
		n.setup, err = filepath.EvalSymlinks(n.setup)
	}
	if err != nil {
		return fmt.Errorf("locate the runner binary for the network installer: %w", err)
	}
	tun := cfg.TunDevice
	if tun == "" {
		tun = "/dev/net/tun"
	}
	f, err := os.OpenFile(tun, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%s is not usable (%w); slirp4netns needs it: load the tun module, make the device readable and writable by the runner's user (mode 0666 is the default), and in a container pass it in (docker run --device /dev/net/tun)", tun, err)
	}
	st, serr := f.Stat()
	f.Close()
	if serr != nil || st.Mode()&os.ModeCharDevice == 0 {
		return fmt.Errorf("%s is not a character device; slirp4netns needs the tun device: in a container pass it in (docker run --device /dev/net/tun)", tun)
	}
	n.resolv = filepath.Join(cfg.Dir, ".resolv.conf")
	n.resolvAllow = filepath.Join(cfg.Dir, ".resolv-allowlist.conf")
	dnsHost, _, _ := net.SplitHostPort(dnsListen)
	for path, ns := range map[string]string{n.resolv: slirpDNS.String(), n.resolvAllow: dnsHost} {
		if err := os.WriteFile(path, []byte("nameserver "+ns+"\n"), 0o644); err != nil {
			return fmt.Errorf("sandbox resolv.conf: %w", err)
		}
	}
	return nil
}

// fromPolicy takes the operator's openings (AGENTA_RUNNER_LOCAL_NETWORK_ALLOW,
// parsed by the egress policy): host:port entries on the host's loopback
// become forwards, the rest is opened in the table.
func (n *netstack) fromPolicy(pol *egress.Policy) {
	allow, allowTo := pol.Allowed()
	n.allow = allow
	for _, ap := range allowTo {
		if ap.Addr().IsLoopback() {
			n.forwards = append(n.forwards, ap.String())
			continue
		}
		n.allowTo = append(n.allowTo, ap)
	}
}

// openings turns a sandbox's Spec.Network.Allow (the request's; under
// "on": the model endpoint) into destinations: entries on the host's
// loopback become forwards, other IPs and CIDRs are opened (on their port
// when the entry names one) after the refused ranges, so they open only
// what the policy lets through. Names are not resolved here: a public name
// needs no opening, a private one is the operator's to list
// (Config.NetAllow), and "allowlist" opens names through its DNS
// forwarder.
func openings(entries []string) (allow []netip.Prefix, allowTo []netip.AddrPort, forwards []string) {
	forwards = loopbackForwards(entries)
	for _, e := range entries {
		r, err := parseRule(strings.TrimSpace(e))
		if err != nil {
			continue
		}
		switch {
		case !r.prefix.IsValid() || r.prefix.Addr().IsLoopback():
		case r.port == 0:
			allow = append(allow, r.prefix)
		default:
			allowTo = append(allowTo, netip.AddrPortFrom(r.prefix.Addr(), uint16(r.port)))
		}
	}
	return allow, allowTo, forwards
}

// policy is the table for one launch of s: the host's addresses are read
// now, since they change. seen counts the DNS forwarder's addresses it
// holds, for trackNet.
func (n *netstack) policy(s *Sandbox) (pol netPolicy, seen int, err error) {
	eg := s.p.cfg.Egress
	host, err := eg.Host()
	if err != nil {
		return pol, 0, err
	}
	pol = netPolicy{
		Open:   append([]netip.Prefix(nil), s.open...),
		Refuse: append([]netip.Prefix(nil), egress.Ranges...),
	}
	// The request's ranges open before the refused ones only where the
	// operator opened them too; its host:port entries only where the
	// policy admits them.
	for _, r := range s.open {
		for _, o := range n.allow {
			if r.Overlaps(o) {
				pol.Allow = append(pol.Allow, narrower(r, o))
			}
		}
		for _, ap := range n.allowTo {
			if r.Contains(ap.Addr()) {
				pol.AllowTo = append(pol.AllowTo, ap)
			}
		}
	}
	for _, ap := range s.openTo {
		if eg.Check(ap) == nil {
			pol.AllowTo = append(pol.AllowTo, ap)
		} else {
			s.log.Info("network blocked: a listed address is on a refused range", "address", ap.String())
		}
	}
	if s.mode == "on" {
		pol.Allow = append(pol.Allow, n.allow...)
		pol.AllowTo = append(pol.AllowTo, n.allowTo...)
		pol.SlirpDNS = true
	} else {
		pol.DenyRest, pol.Dynamic = true, true
		s.mu.Lock()
		for _, a := range s.resolved {
			pol.Allow = append(pol.Allow, netip.PrefixFrom(a, a.BitLen()))
		}
		seen = len(s.resolved)
		s.mu.Unlock()
	}
	pol.Refuse = append(pol.Refuse, host...)
	return pol, seen, nil
}

// narrower is the longer of two overlapping prefixes: their intersection.
func narrower(a, b netip.Prefix) netip.Prefix {
	if a.Bits() >= b.Bits() {
		return a
	}
	return b
}

// netAttach is one launch's slirp4netns.
type netAttach struct {
	cmd    *exec.Cmd
	exit   *os.File // --exit-fd: closing it ends slirp4netns
	done   chan struct{}
	record string // the file naming it in the sandbox dir, for the reaper
	// timings are the waits for bwrap's setup, slirp4netns and the rest
	// of the table's installer (it started first).
	timings [3]time.Duration
	// The installer (it stays with network "allowlist"), and its pipes;
	// mu serialises requests to it.
	mu       sync.Mutex
	setup    *exec.Cmd
	setupIn  io.WriteCloser
	setupOut *bufio.Reader
	setupRaw *os.File
	onClose  func()
	closed   bool
}

// openAddrs has the installer add addrs to the table's DNS sets.
func (a *netAttach) openAddrs(addrs []netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.setupIn == nil {
		return nil // closed: the process is gone
	}
	line, err := json.Marshal(addrs)
	if err != nil {
		return err
	}
	if _, err := a.setupIn.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("open resolved addresses: %w", err)
	}
	_ = a.setupRaw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if ok, err := a.setupOut.ReadString('\n'); ok != "ok\n" {
		return fmt.Errorf("open resolved addresses: %q %v", ok, err)
	}
	return nil
}

// attach connects the network namespace of the sandbox init pid to the
// outside through slirp4netns and installs pol in it, both at once. The
// sandbox's command waits for the byte the caller writes to bwrap's
// --block-fd after attach returned.
func (n *netstack) attach(pid int, blockFD, root string, pol netPolicy) (*netAttach, error) {
	t0 := time.Now()
	if err := waitMapped(pid); err != nil {
		return nil, err
	}
	netns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("sandbox network namespace: %w", err)
	}
	defer netns.Close()
	// The user namespace that owns the network namespace: bwrap's outer
	// one, where the runner's uid is root, not the nested one the sandbox
	// runs in.
	ufd, err := unix.IoctlRetInt(int(netns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return nil, fmt.Errorf("owner of the sandbox network namespace: %w", err)
	}
	userns := os.NewFile(uintptr(ufd), "userns")
	defer userns.Close()
	data, err := json.Marshal(pol)
	if err != nil {
		return nil, err
	}

	// The installer starts first: the table goes in while bwrap still sets
	// up the sandbox. --preserve-credentials: the runner's uid is already
	// the user namespace's root (bwrap maps it to 0 there), and setgroups
	// is denied.
	setup := exec.Command(n.nsenter, "--user=/proc/self/fd/3", "--net=/proc/self/fd/4", "--preserve-credentials", "--", n.setup, NetSetupCommand)
	setup.Env = []string{netSetupEnv + "=1"}
	setup.ExtraFiles = []*os.File{userns, netns}
	errTail := newTail(4 << 10)
	setup.Stderr = errTail
	a := &netAttach{done: make(chan struct{})}
	out := newTail(4 << 10)
	fail := func(what string, err error) (*netAttach, error) {
		a.close()
		return nil, fmt.Errorf("%s (%v): %s", what, err, strings.TrimSpace(out.String()+" "+errTail.String()))
	}
	in, err := setup.StdinPipe()
	if err != nil {
		return fail("installer", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		in.Close()
		return fail("installer", err)
	}
	setup.Stdout = outW
	err = setup.Start()
	outW.Close()
	if err != nil {
		in.Close()
		outR.Close()
		return fail("start the nftables installer", err)
	}
	a.setup, a.setupIn, a.setupOut, a.setupRaw = setup, in, bufio.NewReader(outR), outR
	_, _ = in.Write(append(data, '\n'))

	// slirp4netns once bwrap is done with the namespace: its --configure
	// and bwrap's own loopback setup disturb each other.
	if err := waitBlocked(pid, blockFD); err != nil {
		return fail("sandbox setup", err)
	}
	t1 := time.Now()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return fail("slirp4netns", err)
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return fail("slirp4netns", err)
	}
	cmd := exec.Command(n.slirp, "--configure", "--disable-host-loopback", "--mtu=65520", "--enable-ipv6",
		"--ready-fd=3", "--exit-fd=4", "--userns-path=/proc/self/fd/5", "--netns-type=path", "/proc/self/fd/6", slirpTap)
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{readyW, exitR, userns, netns}
	// Pdeathsig backs up --exit-fd: the write end closes when the runner
	// dies, however it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return fail("start slirp4netns", err)
	}
	a.cmd, a.exit, a.record = cmd, exitW, recordSlirp(root, cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		close(a.done)
	}()

	_ = readyR.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := readyR.Read(b[:]); err != nil {
		return fail("slirp4netns did not come up", err)
	}
	t2 := time.Now()
	_, _ = in.Write([]byte("tap\n"))
	_ = outR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := a.setupOut.ReadString('\n'); line != "ready\n" {
		if err == nil {
			err = fmt.Errorf("installer said %q", line)
		}
		return fail("install the sandbox's nftables table; the kernel needs nf_tables (CONFIG_NF_TABLES, the nft_reject_inet module)", err)
	}
	if !pol.Dynamic {
		// Done: it exits on EOF; close reaps it.
		in.Close()
		a.setupIn = nil
	}
	a.timings = [3]time.Duration{t1.Sub(t0), t2.Sub(t1), time.Since(t2)}
	return a, nil
}

// waitMapped returns once the user namespace of the sandbox init pid has
// its uid map. bwrap reports the pid right after clone, while the child may
// not have written it yet; nsenter's installer keeps its capabilities
// across exec only as the namespace's root, which needs the map. (The map
// shown is of the namespace pid is in now: bwrap's outer one, or the
// nested one, which bwrap makes after the outer one is mapped.)
func waitMapped(pid int) error {
	path := fmt.Sprintf("/proc/%d/uid_map", pid)
	deadline := time.Now().Add(10 * time.Second)
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("sandbox setup: %w", err)
		}
		if len(strings.TrimSpace(string(b))) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("sandbox setup did not map its user namespace in 10s")
		}
		time.Sleep(wait)
	}
}

// waitBlocked returns once the sandbox init pid sits in read(2) on its
// --block-fd. bwrap reports the pid right after clone, while the child is
// still writing its uid map, setting up loopback and nesting its user
// namespace; slirp4netns and the installer must come after all of that.
// bwrap has no "ready" signal, so the init's current syscall is polled; it
// gets there within a few milliseconds.
func waitBlocked(pid int, blockFD string) error {
	fd, _ := strconv.Atoi(blockFD)
	want := fmt.Sprintf("%d 0x%x ", unix.SYS_READ, fd)
	path := fmt.Sprintf("/proc/%d/syscall", pid)
	deadline := time.Now().Add(10 * time.Second)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("sandbox setup: %w", err)
		}
		if strings.HasPrefix(string(b), want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox setup did not reach its network step in 10s (%s)", strings.TrimSpace(string(b)))
		}
		time.Sleep(wait)
	}
}

// close ends slirp4netns and waits for it; nil-safe and idempotent.
func (a *netAttach) close() {
	if a == nil || a.closed {
		return
	}
	a.closed = true
	if a.onClose != nil {
		a.onClose()
	}
	a.mu.Lock()
	if a.setup != nil {
		if a.setupIn != nil {
			a.setupIn.Close() // the installer exits on EOF
			a.setupIn = nil
		}
		done := make(chan struct{})
		go func() {
			_ = a.setup.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = a.setup.Process.Kill()
			<-done
		}
		a.setupRaw.Close()
		a.setup = nil
	}
	a.mu.Unlock()
	if a.cmd == nil {
		return // slirp4netns never started
	}
	a.exit.Close()
	select {
	case <-a.done:
	case <-time.After(2 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	if a.record != "" {
		_ = os.Remove(a.record)
	}
}

// recordSlirp notes a slirp4netns in the sandbox dir as
// slirp4netns.<pid>, holding its start time, and returns the file's path
// ("" when it could not be written). It dies with the runner (--exit-fd,
// Pdeathsig); the record lets the reaper make sure of that (reapSlirps).
func recordSlirp(root string, pid int) string {
	start, ok := procStart(pid)
	if !ok {
		return ""
	}
	path := filepath.Join(root, "slirp4netns."+strconv.Itoa(pid))
	if os.WriteFile(path, []byte(start), 0o600) != nil {
		return ""
	}
	return path
}

// reapSlirps kills the slirp4netns processes recorded in root that still
// run: the same pid, the same start time, the same name.
func reapSlirps(root string) {
	recs, _ := filepath.Glob(filepath.Join(root, "slirp4netns.*"))
	for _, rec := range recs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(rec), "."))
		want, rerr := os.ReadFile(rec)
		if err == nil && rerr == nil {
			if start, ok := procStart(pid); ok && start == string(want) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(rec)
	}
}

// procStart is the start time of a running slirp4netns (field 22 of
// /proc/<pid>/stat); false for any other process.
func procStart(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || !strings.HasSuffix(s[:i], "(slirp4netns") {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

// newNetwork prepares mode "on" for New. A bad Config.Network or
// NetAllow fails New; a host that lacks what the isolated network needs
// does not: mode "on" is then refused per sandbox with the cause (netErr),
// never run on the host's network instead.
func (p *Provider) newNetwork() error {
	switch p.cfg.Network {
	case "", NetworkIsolated:
	case NetworkHost:
		p.log.Warn("LOCAL SANDBOXES SHARE THE HOST'S NETWORK (AGENTA_RUNNER_LOCAL_NETWORK=host): network \"on\" reaches the host's loopback (the runner, databases), its private networks and the cloud metadata endpoint; for development only")
		return nil
	default:
		return errdefs.Invalidf("AGENTA_RUNNER_LOCAL_NETWORK %q: want %q or %q", p.cfg.Network, NetworkIsolated, NetworkHost)
	}
	n := &netstack{}
	n.fromPolicy(p.cfg.Egress)
	if p.netErr = n.check(p.cfg); p.netErr == nil {
		p.net = n
	} else {
		p.log.Error("local sandboxes with network \"on\" are refused: their isolated network does not work on this host", logkey.Error, p.netErr)
	}
	return nil
}

// networkOn describes mode "on" for /health.
func (p *Provider) networkOn() string {
	switch {
	case p.net != nil:
		return NetworkIsolated
	case p.netErr != nil:
		return "unavailable: " + p.netErr.Error()
	}
	return NetworkHost
}

// isolated reports whether s gets its own network through slirp4netns.
func (s *Sandbox) isolated() bool {
	return s.p.bw != nil && s.p.net != nil && (s.mode == "on" || s.mode == "allowlist" && len(s.p.cfg.ProxyBridge) > 0)
}

// openNetwork works out what Spec.Network.Allow opens under mode "on", and
// starts the proxy that serves the host's loopback entries (the key
// gateway, a local model server) on the sandbox's own loopback.
func (s *Sandbox) openNetwork() error {
	entries := append(slices.Clone(s.spec.Network.Allow), s.spec.Network.Runner...)
	s.forwards = loopbackForwards(entries)
	if !s.isolated() {
		return nil
	}
	var fw []string
	s.open, s.openTo, _ = openings(s.spec.Network.Allow)
	fw = slices.Clone(s.forwards)
	if s.mode == "allowlist" {
		return s.startDNS()
	}
	for _, f := range s.p.net.forwards {
		if !slices.Contains(fw, f) {
			fw = append(fw, f)
		}
	}
	s.forwards = fw
	if len(fw) == 0 {
		return nil
	}
	if len(s.p.cfg.ProxyBridge) == 0 {
		s.log.Warn("network \"on\": the host's loopback is not reachable from this sandbox without the proxy bridge", "addresses", strings.Join(fw, ", "))
		return nil
	}
	allow, err := parseAllowlist(fw)
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.info.ID, err)
	}
	return s.startProxy(allow)
}

// startDNS starts the DNS forwarder of an "allowlist" sandbox.
func (s *Sandbox) startDNS() error {
	sock := filepath.Join(s.root, "dns.sock")
	if len(sock) > 107 { // sun_path
		return errdefs.Unprocessablef("network mode allowlist: the DNS socket path %s is longer than a unix socket allows (108 bytes); use a shorter AGENTA_RUNNER_DATA_DIR", sock)
	}
	var err error
	s.dns, err = startDNS(sock, s.proxy.allow, s.log, s.spec.OnEvent, s.openResolved)
	if err == nil {
		err = s.p.user().own(sock)
	}
	if err != nil {
		return fmt.Errorf("create sandbox %s: dns forwarder: %w", s.info.ID, err)
	}
	return nil
}

// openResolved opens addresses the DNS forwarder hands out in the table of
// every live process of s, and in those of processes started later.
func (s *Sandbox) openResolved(addrs []netip.Addr) error {
	// A listed name that resolves to a refused address (DNS rebinding
	// onto the metadata endpoint) opens nothing: only the operator opens
	// those.
	if _, err := s.p.cfg.Egress.Host(); err != nil {
		return err
	}
	s.mu.Lock()
	var fresh []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if s.p.cfg.Egress.Refused(a) {
			s.log.Info("network blocked: a listed name resolved to a refused address", "address", a)
			continue
		}
		if !slices.Contains(s.resolved, a) {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.resolved = append(s.resolved, fresh...)
	nets := make([]*netAttach, 0, len(s.nets))
	for a := range s.nets {
		nets = append(nets, a)
	}
	s.mu.Unlock()
	var errs []error
	for _, a := range nets {
		if err := a.openAddrs(fresh); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// trackNet registers a live process's network for openResolved until it
// closes, and opens what the forwarder resolved since its policy was made
// (the first seen addresses are in its table).
func (s *Sandbox) trackNet(a *netAttach, seen int) error {
	s.mu.Lock()
	if s.nets == nil {
		s.nets = map[*netAttach]struct{}{}
	}
	s.nets[a] = struct{}{}
	missed := slices.Clone(s.resolved[seen:])
	s.mu.Unlock()
	a.onClose = func() {
		s.mu.Lock()
		delete(s.nets, a)
		s.mu.Unlock()
	}
	if len(missed) == 0 {
		return nil
	}
	return a.openAddrs(missed)
}
