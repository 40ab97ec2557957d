package netstack

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/tailbuf"
)

// Stack is the isolated network of mode "on" (and of "allowlist" with the
// proxy bridge): slirp4netns for the traffic, and the SetupMain installer
// for the table. Each bwrap launch gets its own network namespace, so each
// gets its own slirp4netns.
//
// Nothing of it needs privilege in the host's namespaces. bwrap makes the
// sandbox's user and network namespaces as the runner's uid, which owns
// them; slirp4netns joins them by path, and nsenter runs the installer in
// them as the user namespace's root, with CAP_NET_ADMIN there only. The
// sandbox's own processes live in a nested user namespace bwrap makes
// (--disable-userns) and hold no capability in the one that owns their
// network namespace, so they cannot change the table.
type Stack struct {
	egress  *egress.Policy
	slirp   string
	nsenter string
	setup   string // the installer: this binary, run as SetupCommand
	resolv  string // the sandbox's /etc/resolv.conf, naming slirp's DNS
	// resolvAllow names the runner's DNS forwarder (network "allowlist").
	resolvAllow string
	allow       []netip.Prefix
	allowTo     []netip.AddrPort
	// forwards are operator entries on the host's loopback, served on the
	// sandbox's own loopback by the proxy bridge.
	forwards []string
}

// Config is what the isolated network needs to know of the provider's.
type Config struct {
	// Dir is the provider's sandbox directory: the sandboxes'
	// resolv.conf files are written there.
	Dir string
	// Slirp4netns and Nsenter are the binaries; empty means "slirp4netns"
	// and "nsenter" looked up in PATH.
	Slirp4netns string
	Nsenter     string
	// TunDevice is the tun device slirp4netns opens; empty means
	// /dev/net/tun.
	TunDevice string
	// Egress is the operator's policy (AGENTA_RUNNER_LOCAL_NETWORK_ALLOW
	// and the refused ranges); it must not be nil.
	Egress *egress.Policy
}

// New finds what mode "on" needs on this host. Its error names the cause
// and the fix; the provider keeps it and refuses every "on" sandbox with
// it.
func New(cfg Config) (*Stack, error) {
	n := &Stack{egress: cfg.Egress}
	n.fromPolicy(cfg.Egress)
	if err := n.check(cfg); err != nil {
		return nil, err
	}
	return n, nil
}

// check finds what mode "on" needs, for an n whose allow entries are
// parsed.
func (n *Stack) check(cfg Config) error {
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
	// The installer is this very binary (SetupCommand). Not by
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
func (n *Stack) fromPolicy(pol *egress.Policy) {
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

// ResolvConf is the sandbox's /etc/resolv.conf: naming slirp's DNS, or with
// allowlist the runner's DNS forwarder (DNSForwarder, served by the bridge).
func (n *Stack) ResolvConf(allowlist bool) string {
	if allowlist {
		return n.resolvAllow
	}
	return n.resolv
}

// Forwards are the operator's entries on the host's loopback, which the
// proxy bridge serves on every "on" sandbox's own loopback.
func (n *Stack) Forwards() []string { return n.forwards }

// Launch is what one process's table takes of its sandbox.
type Launch struct {
	// Open and OpenTo are what the sandbox's request opens (Openings).
	Open   []netip.Prefix
	OpenTo []netip.AddrPort
	// Allowlist is network "allowlist": everything not accepted is
	// refused, and the table opens Resolved, the addresses the sandbox's
	// DNS forwarder handed out so far (Attachment.OpenAddrs the later
	// ones). Otherwise it is network "on".
	Allowlist bool
	Resolved  []netip.Addr
	// Log is the sandbox's.
	Log *slog.Logger
}

// Policy is the table for one launch: the host's addresses are read now,
// since they change.
func (n *Stack) Policy(l Launch) (pol Policy, err error) {
	eg := n.egress
	host, err := eg.Host()
	if err != nil {
		return pol, err
	}
	pol = Policy{
		Open:   append([]netip.Prefix(nil), l.Open...),
		Refuse: append([]netip.Prefix(nil), egress.Ranges...),
	}
	// The request's ranges open before the refused ones only where the
	// operator opened them too; its host:port entries only where the
	// policy admits them.
	for _, r := range l.Open {
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
	for _, ap := range l.OpenTo {
		if eg.Check(ap) == nil {
			pol.AllowTo = append(pol.AllowTo, ap)
		} else {
			l.Log.Info("network blocked: a listed address is on a refused range", "address", ap.String())
		}
	}
	if !l.Allowlist {
		pol.Allow = append(pol.Allow, n.allow...)
		pol.AllowTo = append(pol.AllowTo, n.allowTo...)
		pol.SlirpDNS = true
	} else {
		pol.DenyRest, pol.Dynamic = true, true
		for _, a := range l.Resolved {
			pol.Allow = append(pol.Allow, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	pol.Refuse = append(pol.Refuse, host...)
	return pol, nil
}

// narrower is the longer of two overlapping prefixes: their intersection.
func narrower(a, b netip.Prefix) netip.Prefix {
	if a.Bits() >= b.Bits() {
		return a
	}
	return b
}

// Attachment is one launch's slirp4netns and table installer; the process
// it was made for owns it and closes it when it ends.
type Attachment struct {
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

// OpenAddrs has the installer add addrs to the table's DNS sets (network
// "allowlist").
func (a *Attachment) OpenAddrs(addrs []netip.Addr) error {
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

// Attach connects the network namespace of the sandbox init pid to the
// outside through slirp4netns and installs pol in it, both at once. The
// sandbox's command waits for the byte the caller writes to bwrap's
// --block-fd (the init's fd blockFD) after Attach returned. root is the
// sandbox's directory, where the slirp4netns is recorded for ReapSlirps.
func (n *Stack) Attach(pid int, blockFD, root string, pol Policy) (*Attachment, error) {
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
	setup := exec.Command(n.nsenter, "--user=/proc/self/fd/3", "--net=/proc/self/fd/4", "--preserve-credentials", "--", n.setup, SetupCommand)
	setup.Env = []string{SetupEnv + "=1"}
	setup.ExtraFiles = []*os.File{userns, netns}
	errTail := tailbuf.New(4 << 10)
	setup.Stderr = errTail
	a := &Attachment{done: make(chan struct{})}
	out := tailbuf.New(4 << 10)
	fail := func(what string, err error) (*Attachment, error) {
		a.Close()
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

// Timings are the waits of Attach: for bwrap's setup, for slirp4netns, and
// for the rest of the table's installer (it started first).
func (a *Attachment) Timings() [3]time.Duration { return a.timings }

// OnClose has f run when the attachment closes, before anything of it is
// ended; it is set before Close can be called.
func (a *Attachment) OnClose(f func()) { a.onClose = f }

// Close ends slirp4netns and waits for it; nil-safe and idempotent.
func (a *Attachment) Close() {
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
// Pdeathsig); the record lets the reaper make sure of that (ReapSlirps).
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

// ReapSlirps kills the slirp4netns processes recorded in root that still
// run: the same pid, the same start time, the same name. The provider
// calls it when it removes a sandbox.
func ReapSlirps(root string) {
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
