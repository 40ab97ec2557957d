package egress

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// fakeHost makes p see a host with these interface addresses.
func fakeHost(p *Policy, addrs ...string) {
	p.hostAddrs = func() ([]netip.Prefix, error) {
		var out []netip.Prefix
		for _, a := range addrs {
			out = append(out, netip.MustParsePrefix(a))
		}
		return out, nil
	}
}

func TestCheck(t *testing.T) {
	p, err := New([]string{"10.9.0.0/24", "127.0.0.1:11434", "198.51.100.7"})
	if err != nil {
		t.Fatal(err)
	}
	fakeHost(p, "127.0.0.1/8", "203.0.113.10/24", "2001:db8:5::10/64")
	p.AddOwn(&net.TCPAddr{IP: net.IPv4zero, Port: 8000})
	p.AddOwn(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 11434}) // a listener the operator also listed
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"8.8.8.8:443", true},
		{"[2606:4700::1111]:443", true},
		{"[::ffff:8.8.8.8]:443", true},
		{"127.0.0.1:80", false},
		{"127.1.2.3:80", false},
		{"[::1]:80", false},
		{"[::ffff:127.0.0.1]:80", false},
		{"[::127.0.0.1]:80", false}, // IPv4-compatible
		{"0.0.0.0:80", false},
		{"[::]:80", false},
		{"169.254.169.254:80", false},
		{"[::ffff:169.254.169.254]:80", false},
		{"[fe80::1]:80", false},
		{"[fe80::1%eth0]:80", false}, // a zone must not hide the range
		{"[fe80::1%1]:80", false},
		{"[fd00::1]:80", false},
		{"[64:ff9b::a9fe:a9fe]:80", false}, // NAT64 of the metadata endpoint
		{"224.0.0.1:80", false},
		{"[ff02::1]:80", false},
		{"255.255.255.255:80", false},
		{"10.0.0.1:5432", false},
		{"192.168.1.1:80", false},
		{"172.16.0.1:80", false},
		{"100.64.0.1:80", false},
		// The host's own public address and its connected subnet.
		{"203.0.113.10:5432", false},
		{"203.0.113.99:80", false},
		{"[2001:db8:5::99]:80", false},
		// The operator's openings.
		{"10.9.0.5:5432", true},
		{"[::ffff:10.9.0.5]:5432", true},
		{"10.9.1.5:5432", false},
		{"198.51.100.7:1", true},
		// The runner's own listeners, even where the operator opened them.
		{"127.0.0.1:8000", false},
		{"203.0.113.10:8000", false},
		{"127.0.0.1:11434", false},
		{"127.0.0.1:11435", false},
	} {
		err := p.Check(netip.MustParseAddrPort(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("Check(%s) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Errorf("Check(%s) = %v, not ErrRefused", tc.addr, err)
		}
	}
	// The refusal says what to change.
	if err := p.Check(netip.MustParseAddrPort("169.254.169.254:80")); err == nil || !strings.Contains(err.Error(), AllowEnv) {
		t.Errorf("refusal %v does not name %s", err, AllowEnv)
	}
	if err := p.Check(netip.MustParseAddrPort("127.0.0.1:8000")); err == nil || !strings.Contains(err.Error(), "runner's own") {
		t.Errorf("own listener refusal: %v", err)
	}
}

func TestOperatorLoopbackPort(t *testing.T) {
	p, err := New([]string{"127.0.0.1:11434"})
	if err != nil {
		t.Fatal(err)
	}
	fakeHost(p)
	if err := p.Check(netip.MustParseAddrPort("127.0.0.1:11434")); err != nil {
		t.Errorf("operator-listed loopback port: %v", err)
	}
	if err := p.Check(netip.MustParseAddrPort("127.0.0.1:11435")); err == nil {
		t.Error("the next loopback port is open too")
	}
	if !p.Refused(netip.MustParseAddr("127.0.0.1")) {
		t.Error("a host:port entry opens its address on every port")
	}
}

func TestNewRejectsBadEntries(t *testing.T) {
	for _, e := range []string{"127.0.0.1", "127.0.0.0/8", "::1", "not a host", "h:0", "h:99999"} {
		if _, err := New([]string{e}); err == nil || !strings.Contains(err.Error(), AllowEnv) {
			t.Errorf("New(%q) = %v", e, err)
		}
	}
}

func TestControl(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	fakeHost(p)
	for _, tc := range []struct {
		network, addr string
		ok            bool
	}{
		{"tcp4", "8.8.8.8:53", true},
		{"udp6", "[2606:4700::1111]:53", true},
		{"tcp4", "127.0.0.1:5432", false},
		{"tcp6", "[::ffff:127.0.0.1]:5432", false},
		{"tcp6", "[fe80::1%lo]:5432", false},
		{"unix", "/run/postgresql/.s.PGSQL.5432", false},
		{"tcp", "not-an-address", false},
	} {
		if err := p.Control(tc.network, tc.addr, nil); (err == nil) != tc.ok {
			t.Errorf("Control(%s, %s) = %v, want ok=%v", tc.network, tc.addr, err, tc.ok)
		}
	}
	gw := netip.MustParseAddrPort("127.0.0.1:4000")
	c := p.ControlExcept([]netip.AddrPort{gw})
	if err := c("tcp4", gw.String(), nil); err != nil {
		t.Errorf("trusted runner service: %v", err)
	}
	if err := c("tcp4", "127.0.0.1:4001", nil); err == nil {
		t.Error("ControlExcept opened the next port")
	}
}

// A real dial: the address the resolver returns is the one checked, so a
// name for loopback is refused before any connection is made.
func TestDialerRefusesBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, host := range []string{"localhost", "127.0.0.1"} {
		if c, err := p.Dialer(5*time.Second).Dial("tcp", net.JoinHostPort(host, port)); err == nil {
			c.Close()
			t.Errorf("dial %s reached the loopback listener", host)
		} else if !errors.Is(err, ErrRefused) {
			t.Errorf("dial %s: %v, not ErrRefused", host, err)
		}
	}
	// Control: an operator listing makes it reachable.
	op, err := New([]string{ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := op.Dialer(5*time.Second).Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("operator-listed listener: %v", err)
	}
	c.Close()
	<-accepted
}

func TestCheckPrefix(t *testing.T) {
	p, err := New([]string{"10.9.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	fakeHost(p, "203.0.113.10/24")
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"0.0.0.0/0", true}, // the internet; refused parts stay refused at dial
		{"::/0", true},
		{"8.8.8.0/24", true},
		{"127.0.0.1/32", false},
		{"127.0.0.0/8", false},
		{"169.254.169.254/32", false},
		{"10.0.0.0/8", true}, // overlaps the operator's 10.9.0.0/24
		{"10.10.0.0/16", false},
		{"::1/128", false},
		{"::ffff:127.0.0.1/128", false},
		{"fe80::/64", false},
		{"203.0.113.10/32", false},
		{"203.0.113.0/25", false},
	} {
		if err := p.CheckPrefix(netip.MustParsePrefix(tc.prefix)); (err == nil) != tc.ok {
			t.Errorf("CheckPrefix(%s) = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
	}
}

// The host's addresses are read again after hostRefresh, so an address
// the host gains later is refused too.
func TestHostRefresh(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	fakeHost(p)
	target := netip.MustParseAddrPort("203.0.113.10:80")
	if err := p.Check(target); err != nil {
		t.Fatal(err)
	}
	fakeHost(p, "203.0.113.10/32")
	now = now.Add(hostRefresh)
	if err := p.Check(target); err == nil {
		t.Error("a new host address is not refused after the refresh")
	}
}

func BenchmarkCheck(b *testing.B) {
	p, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	ap := netip.MustParseAddrPort("8.8.8.8:443")
	for b.Loop() {
		if err := p.Check(ap); err != nil {
			b.Fatal(err)
		}
	}
}
