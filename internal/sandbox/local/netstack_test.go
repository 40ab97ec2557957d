package local_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// The simulated internet: two network namespaces the test makes itself,
// joined by a veth. "host" plays the runner's host (the inner test runs
// there: its loopback, its own addresses); "inet" plays everything beyond
// it: a public host (TEST-NET-3, 2001:db8::/32), a DNS server, and one
// listener in each range the table refuses. host routes everything to
// inet, so nothing a sandbox sends can leave the two namespaces.
const (
	simHostAddr  = "198.51.100.1"
	simInetAddr  = "198.51.100.2"
	simHostAddr6 = "2001:db8::1"
	simInetAddr6 = "2001:db8::2"
	simPublic    = "203.0.113.5"
	simPublic6   = "2001:db8:1::5"
	simName      = "public.test"
	simPort      = "7"
	simOtherPort = "8"
	// simAllowed is opened by AGENTA_RUNNER_LOCAL_NETWORK_ALLOW in the
	// inner test; simNotAllowed is next to it and stays refused.
	simAllowCIDR  = "10.9.0.0/24"
	simAllowed    = "10.9.0.5"
	simNotAllowed = "10.9.1.5"
)

// simNames are what inet's DNS server knows; simRebind points a listed
// name at the metadata endpoint.
var simNames = map[string]string{simName: simPublic, simRebind: "169.254.169.254"}

const simRebind = "rebind.test"

// simRefused has one listening address in inet for each refused range
// that can hold one.
var simRefused = []string{
	"10.66.0.1", "100.64.0.1", "169.254.169.254", "172.16.0.1", "192.0.0.1",
	"192.168.0.1", "198.18.0.1", "fd12::1", "64:ff9b::a42:1", simNotAllowed,
}

// simUnplaceable are addresses in refused ranges no listener can hold;
// the table must still refuse them at once.
var simUnplaceable = []string{"0.1.2.3", "240.0.0.1", "::ffff:10.66.0.1", "fe80::1%tap0"}

func init() {
	helpers["probe"] = helperProbe
	helpers["inet-serve"] = helperInetServe
	helpers["listen-any"] = helperListenAny
	helpers["hold"] = helperHold
}

// probeResult is one line of helperProbe's output.
type probeResult struct {
	Kind, Target string
	OK           bool
	Got, Err     string
	MS           float64
}

// helperProbe tries each "kind target" pair in args (tcp, udp, dns,
// resolve, unix) and prints one JSON probeResult per line.
func helperProbe(args []string) int {
	enc := json.NewEncoder(os.Stdout)
	for i := 0; i+1 < len(args); i += 2 {
		kind, target := args[i], args[i+1]
		start := time.Now()
		got, err := probe(kind, target)
		r := probeResult{Kind: kind, Target: target, OK: err == nil, Got: got, MS: float64(time.Since(start).Microseconds()) / 1000}
		if err != nil {
			r.Err = err.Error()
		}
		_ = enc.Encode(r)
	}
	return 0
}

func probe(kind, target string) (string, error) {
	const patience = 3 * time.Second // a dropped packet shows as this long
	switch kind {
	case "tcp", "unix":
		c, err := net.DialTimeout(kind, target, patience)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(patience))
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	case "udp":
		c, err := net.DialTimeout("udp", target, patience)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(patience))
		if _, err := c.Write([]byte("ping")); err != nil {
			return "", err
		}
		b := make([]byte, 512)
		n, err := c.Read(b)
		return string(b[:n]), err
	case "dns":
		return queryA(target, simName)
	case "resolve":
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		ips, err := net.DefaultResolver.LookupHost(ctx, target)
		return strings.Join(ips, ","), err
	}
	return "", fmt.Errorf("unknown probe %q", kind)
}

// queryA asks the DNS server at server for name's A record.
func queryA(server, name string) (string, error) {
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	msg, err := q.Pack()
	if err != nil {
		return "", err
	}
	c, err := net.DialTimeout("udp", server, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return "", err
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	if err != nil {
		return "", err
	}
	var resp dnsmessage.Message
	if err := resp.Unpack(b[:n]); err != nil {
		return "", err
	}
	for _, a := range resp.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			return net.IP(r.A[:]).String(), nil
		}
	}
	return "", errors.New("no A record")
}

// helperInetServe runs in inet: a greeter on TCP port 7 and an echo on UDP
// port 7 (every address, both families), and a DNS server on UDP port 53
// answering simName with simPublic. It prints "ready" and serves until
// stdin closes.
func helperInetServe([]string) int {
	for _, port := range []string{simPort, simOtherPort} {
		ln, err := net.Listen("tcp", ":"+port)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "hello from %s\n", c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
				c.Close()
			}
		}()
	}
	// UDP per address: a wildcard socket would answer from the address
	// of the route back, which the client's connected socket ignores.
	for _, a := range append([]string{simPublic, simPublic6, simAllowed, simInetAddr}, simRefused...) {
		echo, err := net.ListenPacket("udp", net.JoinHostPort(a, simPort))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		go func() {
			b := make([]byte, 512)
			for {
				n, from, err := echo.ReadFrom(b)
				if err != nil {
					return
				}
				_, _ = echo.WriteTo(append([]byte("echo "), b[:n]...), from)
			}
		}()
	}
	for _, a := range []string{simPublic, simInetAddr} {
		dns, err := net.ListenPacket("udp", net.JoinHostPort(a, "53"))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		go serveDNS(dns)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func serveDNS(pc net.PacketConn) {
	b := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(b)
		if err != nil {
			return
		}
		var q dnsmessage.Message
		if q.Unpack(b[:n]) != nil || len(q.Questions) != 1 {
			continue
		}
		resp := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true}, Questions: q.Questions}
		qq := q.Questions[0]
		addr, known := simNames[strings.ToLower(strings.TrimSuffix(qq.Name.String(), "."))]
		if known && qq.Type == dnsmessage.TypeA {
			ip := net.ParseIP(addr).To4()
			resp.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: qq.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
				Body:   &dnsmessage.AResource{A: [4]byte(ip)},
			}}
		} else if !known {
			resp.RCode = dnsmessage.RCodeNameError
		}
		if out, err := resp.Pack(); err == nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

// helperListenAny listens on TCP args[0] on every address of the sandbox,
// prints "listening" and serves until killed.
func helperListenAny(args []string) int {
	ln, err := net.Listen("tcp", ":"+args[0])
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		fmt.Fprintln(c, "hello from the sandbox")
		c.Close()
	}
}

// helperHold makes a provider in args[0], starts a network "on" sandbox
// that sleeps, prints the pid of its slirp4netns and waits to be killed.
func helperHold(args []string) int {
	cfg := local.Config{Dir: args[0], MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit, DiskMB: local.NoLimit}
	p, err := local.New(cfg)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	sb, err := p.Create(context.Background(), sandbox.Spec{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	proc, err := sb.Start(context.Background(), sandbox.Cmd{Path: "/bin/sleep", Args: []string{"600"}})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	pids := slirpChildren()
	if len(pids) != 1 {
		fmt.Println("slirp4netns processes:", pids)
		return 1
	}
	fmt.Println(pids[0])
	_ = proc.Wait()
	return 0
}

// slirpChildren are the pids of this process's slirp4netns children.
func slirpChildren() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(slirp4netns") {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// netnsTool skips or fails without what the simulated internet needs.
func netnsTool(t *testing.T) {
	t.Helper()
	needBwrap(t)
	var missing []string
	for _, bin := range []string{"ip", "slirp4netns", "nsenter", "setpriv", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root (to make network namespaces)")
	}
	if len(missing) > 0 {
		if os.Getenv("RUNNER_TEST_BWRAP") == "1" {
			t.Fatalf("RUNNER_TEST_BWRAP=1 but the simulated internet lacks %v (apt-get install iproute2 slirp4netns)", missing)
		}
		t.Skipf("the simulated internet needs %v", missing)
	}
}

// simNet makes the two namespaces and returns their names:
// rn-host-<pid>-<random> and rn-inet-<…>, unique even when a killed run
// left its pair behind (its pid may come round again); such leftovers
// are deleted first.
func simNet(t *testing.T) (hostNS, inetNS string) {
	t.Helper()
	reapSimNets(t)
	id := strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(uint64(time.Now().UnixNano())&0xffffff, 16)
	hostNS, inetNS = simNetPrefixes[0]+id, simNetPrefixes[1]+id
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", hostNS)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", hostNS).Run() })
	ip("netns", "add", inetNS)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", inetNS).Run() })
	ip("-n", hostNS, "link", "add", "vh", "type", "veth", "peer", "name", "vi", "netns", inetNS)
	for _, ns := range []string{hostNS, inetNS} {
		ip("-n", ns, "link", "set", "lo", "up")
	}
	ip("-n", hostNS, "addr", "add", simHostAddr+"/24", "dev", "vh")
	ip("-n", hostNS, "-6", "addr", "add", simHostAddr6+"/64", "dev", "vh", "nodad")
	ip("-n", hostNS, "link", "set", "vh", "up")
	ip("-n", inetNS, "addr", "add", simInetAddr+"/24", "dev", "vi")
	ip("-n", inetNS, "-6", "addr", "add", simInetAddr6+"/64", "dev", "vi", "nodad")
	ip("-n", inetNS, "link", "set", "vi", "up")
	// Everything the host sends goes to inet, and nowhere else.
	ip("-n", hostNS, "route", "add", "default", "via", simInetAddr)
	ip("-n", hostNS, "-6", "route", "add", "default", "via", simInetAddr6)
	for _, a := range append([]string{simPublic, simPublic6, simAllowed}, simRefused...) {
		bits := "/32"
		if strings.Contains(a, ":") {
			bits = "/128"
		}
		ip("-n", inetNS, "addr", "add", a+bits, "dev", "lo")
	}
	return hostNS, inetNS
}

var simNetPrefixes = [2]string{"rn-host-", "rn-inet-"}

// reapSimNets deletes the simulated internets of test processes that are
// gone (killed before their cleanup ran).
func reapSimNets(t *testing.T) {
	t.Helper()
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		for _, prefix := range simNetPrefixes {
			pid, _, _ := strings.Cut(strings.TrimPrefix(e.Name(), prefix), "-")
			n, err := strconv.Atoi(pid)
			if !strings.HasPrefix(e.Name(), prefix) || err != nil || n <= 0 || n == os.Getpid() {
				continue
			}
			if errors.Is(syscall.Kill(n, 0), syscall.ESRCH) {
				if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
					t.Logf("a stale simulated internet stays: ip netns del %s: %v: %s", e.Name(), err, out)
				}
			}
		}
	}
}

// TestNetworkOnSimulatedInternet runs TestNetworkOnInside in the simulated
// host, as root and as an unprivileged uid.
func TestNetworkOnSimulatedInternet(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulated internet in network namespaces: skipped under -short")
	}
	netnsTool(t)
	hostNS, inetNS := simNet(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy anyone can run, for the unprivileged pass.
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	bin := filepath.Join(dir, "local.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// The simulated host's resolver is inet's DNS server (slirp4netns
	// reads it for 10.0.2.3), and a tun device anyone can open.
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+simInetAddr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tun := filepath.Join(dir, "tun")
	if err := unix.Mknod(tun, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(tun, 0o666)

	serve := exec.Command("ip", "netns", "exec", inetNS, exe, "inet-serve")
	stdin, _ := serve.StdinPipe()
	out, _ := serve.StdoutPipe()
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = serve.Wait()
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("inet server: %q", line)
	}

	for _, uid := range []int{0, 65534} {
		t.Run("uid"+strconv.Itoa(uid), func(t *testing.T) {
			script := `mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /dev/net/tun && shift 2 && exec "$@"`
			args := []string{"netns", "exec", hostNS, "sh", "-c", script, "sh", resolv, tun}
			if uid != 0 {
				args = append(args, "setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(uid), "--clear-groups", "--")
			}
			args = append(args, bin, "-test.run=^TestNetworkOnInside$", "-test.v", "-test.count=1")
			cmd := exec.Command("ip", args...)
			cmd.Env = append(os.Environ(), "RUNNER_TEST_SIMNET=1", "TMPDIR=/tmp", "HOME=/tmp")
			out, err := cmd.CombinedOutput()
			t.Logf("inner test:\n%s", out)
			if err != nil || !strings.Contains(string(out), "--- PASS: TestNetworkOnInside") {
				t.Fatalf("inner test as uid %d: %v", uid, err)
			}
		})
	}
}

// TestNetworkOnInside is the simulated host's side; it runs only under
// TestNetworkOnSimulatedInternet.
func TestNetworkOnInside(t *testing.T) {
	if os.Getenv("RUNNER_TEST_SIMNET") != "1" {
		t.Skip("runs inside TestNetworkOnSimulatedInternet")
	}
	t.Logf("uid %d", os.Geteuid())
	// The host's own services: every address of the simulated host, and an
	// abstract unix socket.
	hostLn, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go greet(hostLn, "hello from the host")
	hostPort := strconv.Itoa(hostLn.Addr().(*net.TCPAddr).Port)
	abstract := "@runner-simnet-" + strconv.Itoa(os.Getpid())
	unixLn, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer unixLn.Close()
	go greet(unixLn, "hello from the host")

	// Controls: from the host itself everything is reachable, so what the
	// sandbox cannot reach is refused by its table, not by the topology.
	for _, a := range append([]string{simPublic, simAllowed}, simRefused...) {
		if got, err := probe("tcp", net.JoinHostPort(a, simPort)); err != nil {
			t.Fatalf("control: the host cannot reach %s: %v %q", a, err, got)
		}
	}
	for _, a := range []string{"127.0.0.1", "::1", simHostAddr, simHostAddr6} {
		if _, err := probe("tcp", net.JoinHostPort(a, hostPort)); err != nil {
			t.Fatalf("control: host service at %s: %v", a, err)
		}
	}
	if _, err := probe("unix", abstract); err != nil {
		t.Fatalf("control: abstract socket: %v", err)
	}
	if _, err := probe("tcp", "10.66.0.1:"+simOtherPort); err != nil {
		t.Fatalf("control: 10.66.0.1:%s: %v", simOtherPort, err)
	}

	p := newBwrap(t, func(c *local.Config) {
		c.NetAllow = []string{simAllowCIDR}
		// ip netns exec mounts a fresh /sys, without the cgroup tree.
		c.MemoryMB, c.Pids, c.CPUs, c.DiskMB = local.NoLimit, local.NoLimit, local.NoLimit, local.NoLimit
	})
	sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "on"}})

	wants := []want{
		{"tcp", net.JoinHostPort(simPublic, simPort), "hello from " + simPublic},
		{"udp", net.JoinHostPort(simPublic, simPort), "echo ping"},
		{"tcp", net.JoinHostPort(simPublic6, simPort), "hello from " + simPublic6},
		{"udp", net.JoinHostPort(simPublic6, simPort), "echo ping"},
		{"dns", net.JoinHostPort(simPublic, "53"), simPublic},
		{"resolve", simName, simPublic}, // /etc/resolv.conf, 10.0.2.3, slirp, the host's resolver
		{"tcp", net.JoinHostPort(simAllowed, simPort), "hello from " + simAllowed},
		{"unix", abstract, ""},
		{"tcp", "10.0.2.3:54", ""},
		{"udp", "10.0.2.3:54", ""},
	}
	for _, a := range []string{"127.0.0.1", "::1", "10.0.2.2", "fd00::2", simHostAddr, simHostAddr6} {
		wants = append(wants, want{"tcp", net.JoinHostPort(a, hostPort), ""})
	}
	for _, a := range append(append([]string(nil), simRefused...), simUnplaceable...) {
		wants = append(wants, want{"tcp", net.JoinHostPort(a, simPort), ""}, want{"udp", net.JoinHostPort(a, simPort), ""})
	}
	checkProbes(t, sb, wants)

	// A sandbox listener opens nothing on the host.
	t.Run("listener", func(t *testing.T) {
		exe, _ := os.Executable()
		proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: exe, Args: []string{"listen-any", "4711"}, Env: sandboxtest.Env(sb)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = proc.Kill(); _ = proc.Wait() }()
		if line, _ := bufio.NewReader(proc.Stdout()).ReadString('\n'); line != "listening\n" {
			t.Fatalf("sandbox listener: %q %s", line, proc.StderrTail())
		}
		for _, a := range []string{"127.0.0.1", "::1", simHostAddr, simHostAddr6} {
			if got, err := probe("tcp", net.JoinHostPort(a, "4711")); err == nil {
				t.Errorf("the sandbox's listener answers on the host at %s: %q", a, got)
			}
		}
	})

	// Nothing is left once the sandbox's processes are done.
	if pids := slirpChildren(); len(pids) != 0 {
		t.Errorf("slirp4netns still running after the sandbox's processes ended: %v", pids)
	}

	// The table cannot be changed from inside, also not after unshare.
	if nft, err := exec.LookPath("nft"); err == nil {
		out, _ := sandboxtest.Sh(t, sb, nft+" flush ruleset; echo rc=$?; unshare -Ur "+nft+" flush ruleset; echo rc=$?")
		if strings.Count(out, "rc=1") != 2 {
			t.Errorf("nft flush ruleset inside: %s", out)
		}
	} else {
		t.Log("nft not installed: the flush check is left out (apt-get install nftables)")
	}
	after, _ := run(t, sb, nil, "probe", "tcp", "10.66.0.1:"+simPort)
	if strings.Contains(after, `"OK":true`) {
		t.Errorf("the table was changed from inside: %s", after)
	}

	// A private model endpoint given by IP (Spec.Network.Allow under "on")
	// opens nothing the operator did not open, and then on its port only.
	t.Run("model endpoint", func(t *testing.T) {
		endpoint := "10.66.0.1:" + simPort
		sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "on", Allow: []string{endpoint}}})
		checkProbes(t, sb, []want{{"tcp", endpoint, ""}})
		op := newBwrap(t, func(c *local.Config) {
			c.NetAllow = []string{endpoint}
			c.MemoryMB, c.Pids, c.CPUs = local.NoLimit, local.NoLimit, local.NoLimit
		})
		sb = createSpec(t, op, sandbox.Spec{Network: sandbox.Network{Mode: "on", Allow: []string{endpoint}}})
		checkProbes(t, sb, []want{
			{"tcp", endpoint, "hello from 10.66.0.1"},
			{"tcp", "10.66.0.1:" + simOtherPort, ""}, // reachable from the host (control above)
			{"tcp", "172.16.0.1:" + simPort, ""},
		})
	})

	// An allowlist of everything is the internet, never the host, its
	// networks or the metadata endpoint.
	t.Run("allowlist everything", func(t *testing.T) {
		sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "allowlist", Allow: []string{"0.0.0.0/0", "::/0"}}})
		wants := []want{
			{"tcp", net.JoinHostPort(simPublic, simPort), "hello from " + simPublic},
			{"tcp", net.JoinHostPort(simPublic6, simPort), "hello from " + simPublic6},
			{"tcp", net.JoinHostPort(simAllowed, simPort), "hello from " + simAllowed}, // the operator's
		}
		for _, a := range []string{simHostAddr, simHostAddr6} {
			wants = append(wants, want{"tcp", net.JoinHostPort(a, hostPort), ""})
		}
		for _, a := range append(append([]string(nil), simRefused...), simUnplaceable...) {
			wants = append(wants, want{"tcp", net.JoinHostPort(a, simPort), ""})
		}
		checkProbes(t, sb, wants)
	})

	// Allowlist on the same stack: everything refused but what is listed;
	// listed names open through the runner's DNS forwarder.
	t.Run("allowlist", func(t *testing.T) {
		var mu sync.Mutex
		var blocked []string
		sb := createSpec(t, p, sandbox.Spec{
			Network: sandbox.Network{Mode: "allowlist", Allow: []string{simName, simRebind, net.JoinHostPort(simAllowed, simPort)}},
			OnEvent: func(name string, data map[string]any) {
				mu.Lock()
				defer mu.Unlock()
				if name == "network.blocked" {
					blocked = append(blocked, fmt.Sprint(data["host"]))
				}
			},
		})
		public := net.JoinHostPort(simPublic, simPort)
		wants := []want{
			{"tcp", public, ""}, // not yet resolved
			{"resolve", simName, simPublic},
			{"tcp", public, "hello from " + simPublic},
			{"udp", public, "echo ping"},
			{"tcp", net.JoinHostPort(simAllowed, simPort), "hello from " + simAllowed},
			{"resolve", "other.test", ""},
			{"dns", "10.0.2.3:53", ""},                       // slirp's DNS is not the way out here
			{"dns", net.JoinHostPort(simInetAddr, "53"), ""}, // a DNS server not listed
			{"tcp", net.JoinHostPort(simPublic6, simPort), ""},
			{"tcp", net.JoinHostPort(simNotAllowed, simPort), ""},
			{"resolve", simRebind, "169.254.169.254"}, // answered, but opens nothing
			{"tcp", net.JoinHostPort("169.254.169.254", simPort), ""},
		}
		checkProbes(t, sb, wants)
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(blocked, "other.test") {
			t.Errorf("network.blocked events %v lack other.test", blocked)
		}
	})

	// SIGKILL of the runner leaves no slirp4netns behind.
	t.Run("sigkill", func(t *testing.T) {
		exe, _ := os.Executable()
		hold := exec.Command(exe, "hold", t.TempDir())
		out, _ := hold.StdoutPipe()
		hold.Stderr = os.Stderr
		if err := hold.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			_ = hold.Process.Kill()
			_ = hold.Wait()
			t.Fatalf("hold: %q", line)
		}
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(pidfd)
		_ = hold.Process.Signal(syscall.SIGKILL)
		_ = hold.Wait()
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 5000); err != nil || n != 1 {
			t.Errorf("slirp4netns %d outlived the runner's SIGKILL by 5 s", pid)
		}
	})
}

func greet(ln net.Listener, msg string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintln(c, msg)
		c.Close()
	}
}

// want is one probe from inside a sandbox and its expected answer; got ""
// means refused, within 100 ms.
type want struct{ kind, target, got string }

// checkProbes runs the probes in one sandbox process, in order, and checks
// each answer.
func checkProbes(t *testing.T, sb sandbox.Sandbox, wants []want) {
	t.Helper()
	var args []string
	for _, w := range wants {
		args = append(args, w.kind, w.target)
	}
	out, err := run(t, sb, nil, "probe", args...)
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	for _, w := range wants {
		var r probeResult
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("probe output: %v\n%s", err, out)
		}
		switch {
		case r.Target != w.target:
			t.Fatalf("probe order: %s, want %s", r.Target, w.target)
		case w.got != "" && (!r.OK || r.Got != w.got):
			t.Errorf("%s %s: %q, %s; want %q", w.kind, w.target, r.Got, r.Err, w.got)
		case w.got == "" && r.OK:
			t.Errorf("%s %s reached from the sandbox: %q", w.kind, w.target, r.Got)
		case w.got == "" && r.MS >= 100 && w.kind != "resolve":
			t.Errorf("%s %s: refused after %.1f ms (%s); want a reject within 100 ms", w.kind, w.target, r.MS, r.Err)
		}
	}
}

// TestSimNetReapsLeftovers: a simulated internet whose test process was
// killed (here: a pid that has exited) is deleted by the next simNet,
// and a live one is kept.
func TestSimNetReapsLeftovers(t *testing.T) {
	netnsTool(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := simNetPrefixes[0] + strconv.Itoa(gone.Process.Pid) + "-0"
	if out, err := exec.Command("ip", "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", stale, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", stale).Run() })
	hostNS, _ := simNet(t)
	if _, err := os.Stat(filepath.Join("/run/netns", stale)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover %s of an exited process is still there (%v)", stale, err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", hostNS)); err != nil {
		t.Errorf("this test's own %s: %v", hostNS, err)
	}
}
