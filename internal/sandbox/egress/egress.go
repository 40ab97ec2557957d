// Package egress is the one refused-range policy for connections made on a
// sandbox's behalf: the local allowlist proxy and its bridge forwards, the
// key gateway's upstream, the nftables table of an isolated sandbox, and
// admission of a request's model endpoint and allowlist entries. The
// refused ranges are the host's loopback, unspecified, private and
// link-local networks (the cloud metadata endpoint 169.254.169.254),
// CGNAT, benchmarking, multicast and reserved space, their IPv6
// counterparts and IPv4-mapped and NAT64 forms, the host's own interface
// addresses and their connected subnets, and the runner's own listeners;
// the operator reopens what a deployment needs with
// AGENTA_RUNNER_LOCAL_NETWORK_ALLOW (the runner's own listeners stay
// refused).
//
// Dialers enforce it with Control, a net.Dialer.Control func: it sees the
// address actually dialled, after resolution, so a listed name that
// resolves (or rebinds, TTL 0) to a refused address is refused too. It is
// a helper of the sandbox family, not an implementation: the local
// provider, the gateway, the runner and the tools all import it.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
)

// AllowEnv is the operator's setting that reopens refused destinations.
const AllowEnv = "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW"

// ErrRefused marks a destination on a refused range.
var ErrRefused = errors.New("destination refused")

// Ranges are the refused ranges besides the host's own networks.
var Ranges = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"224.0.0.0/4", "240.0.0.0/4",
		// ::/96 holds ::, ::1 and the IPv4-compatible ::a.b.c.d.
		"::/96", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48",
		"fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// Reserved reports whether a lies in one of Ranges. An IPv4-mapped
// address is judged by its IPv4 address, which is what a dial reaches
// (::ffff:0:0/96 is in Ranges for the nftables table, where such packets
// stay IPv6).
func Reserved(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	// A zone would make every Contains false (fe80::1%eth0).
	a = a.Unmap().WithZone("")
	for _, p := range Ranges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hostRefresh is how long the host's addresses are reused before they are
// read again: reading them costs a netlink dump, and every dial checks.
const hostRefresh = time.Second

// Policy decides which addresses a dial for a sandbox may reach. Safe for
// concurrent use.
type Policy struct {
	allow   []netip.Prefix   // operator's CIDRs and addresses: every port
	allowTo []netip.AddrPort // operator's host:port entries

	// hostAddrs reads the host's interface addresses with their prefix
	// lengths; now is the clock of its cache.
	hostAddrs func() ([]netip.Prefix, error)
	now       func() time.Time

	mu        sync.Mutex
	own       []netip.AddrPort // the runner's listeners; refused even when allowed
	host      []netip.Prefix   // addresses and connected subnets
	hostErr   error
	hostAt    time.Time
	hostValid bool
}

// New parses the operator's entries (AllowEnv): CIDRs, addresses and
// host:port, names resolved once, now. The host's loopback is opened by
// host:port only, never as a range.
func New(entries []string) (*Policy, error) {
	p := &Policy{hostAddrs: interfaceAddrs, now: time.Now}
	for _, raw := range entries {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		bad := func(why string) error {
			return errdefs.Invalidf("%s entry %q: %s", AllowEnv, raw, why)
		}
		if pr, err := netip.ParsePrefix(e); err == nil {
			if pr.Addr().IsLoopback() {
				return nil, bad("the host's loopback is reached by host:port only")
			}
			p.allow = append(p.allow, pr.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			if ip.IsLoopback() {
				return nil, bad("the host's loopback is reached by host:port only")
			}
			p.allow = append(p.allow, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		host, port, err := net.SplitHostPort(e)
		if err != nil {
			return nil, bad("want a CIDR, an address or host:port")
		}
		pn, err := strconv.Atoi(port)
		if err != nil || pn <= 0 || pn > 65535 {
			return nil, bad("bad port")
		}
		ips, err := resolveHost(host)
		if err != nil {
			return nil, bad(err.Error())
		}
		for _, ip := range ips {
			p.allowTo = append(p.allowTo, netip.AddrPortFrom(ip, uint16(pn)))
		}
	}
	return p, nil
}

// resolveHost returns the addresses of an address literal or a name.
func resolveHost(host string) ([]netip.Addr, error) {
	if host == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

// Allowed are the operator's ranges and host:port entries.
func (p *Policy) Allowed() ([]netip.Prefix, []netip.AddrPort) {
	return slices.Clone(p.allow), slices.Clone(p.allowTo)
}

// AddOwn refuses the runner's own listener at addr (its API, its metrics)
// even where the operator opened its range. A listener on the unspecified
// address stands for every host address and loopback on its port.
func (p *Policy) AddOwn(addr net.Addr) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.own = append(p.own, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
}

// Host are the host's interface addresses and their connected subnets,
// read at most once per second.
func (p *Policy) Host() ([]netip.Prefix, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hostLocked()
}

func (p *Policy) hostLocked() ([]netip.Prefix, error) {
	if now := p.now(); !p.hostValid || now.Sub(p.hostAt) >= hostRefresh || now.Before(p.hostAt) {
		addrs, err := p.hostAddrs()
		p.host, p.hostErr, p.hostAt, p.hostValid = nil, err, now, true
		for _, a := range addrs {
			// The address itself and its subnet.
			p.host = append(p.host, netip.PrefixFrom(a.Addr(), a.Addr().BitLen()), a.Masked())
		}
	}
	return p.host, p.hostErr
}

func interfaceAddrs() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("the host's addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ones, _ := ipn.Mask.Size()
		ip = ip.Unmap()
		if ip.Is4() && ones > 32 {
			ones -= 96
		}
		out = append(out, netip.PrefixFrom(ip, ones))
	}
	return out, nil
}

// Check returns nil when a dial to ap may proceed, else an error wrapping
// ErrRefused that names what refused it and the setting to change.
func (p *Policy) Check(ap netip.AddrPort) error {
	a := ap.Addr().Unmap().WithZone("")
	p.mu.Lock()
	defer p.mu.Unlock()
	host, err := p.hostLocked()
	if err != nil {
		return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("%w: %v (the host's own addresses are refused, and could not be read)", ErrRefused, err))
	}
	for _, o := range p.own {
		if o.Port() != ap.Port() {
			continue
		}
		if o.Addr() == a || o.Addr().IsUnspecified() && (a.IsLoopback() || a.IsUnspecified() || inAny(a, host, true)) {
			return fmt.Errorf("%s: %w: it is the runner's own listener", ap, ErrRefused)
		}
	}
	if slices.Contains(p.allowTo, netip.AddrPortFrom(a, ap.Port())) || inAny(a, p.allow, false) {
		return nil
	}
	if Reserved(ap.Addr()) {
		return fmt.Errorf("%s: %w: loopback, private, link-local, multicast or reserved address; the operator can open it with %s", ap, ErrRefused, AllowEnv)
	}
	if inAny(a, host, false) {
		return fmt.Errorf("%s: %w: the host's own address or connected subnet; the operator can open it with %s", ap, ErrRefused, AllowEnv)
	}
	return nil
}

// inAny reports whether a lies in one of ps; exact keeps only the
// single-address prefixes.
func inAny(a netip.Addr, ps []netip.Prefix, exact bool) bool {
	for _, p := range ps {
		if exact && !p.IsSingleIP() {
			continue
		}
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Refused reports whether a, on any port the operator did not list, is
// refused: the DNS forwarder opens no such address.
func (p *Policy) Refused(a netip.Addr) bool {
	return p.Check(netip.AddrPortFrom(a, 0)) != nil
}

// Control is a net.Dialer.Control func enforcing the policy on the address
// actually dialled.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	return p.control(nil, network, address)
}

// ControlExcept is Control that lets through the runner's own services in
// trusted (the key gateway a sandbox is meant to reach).
func (p *Policy) ControlExcept(trusted []netip.AddrPort) func(network, address string, c syscall.RawConn) error {
	trusted = slices.Clone(trusted)
	return func(network, address string, _ syscall.RawConn) error {
		return p.control(trusted, network, address)
	}
}

func (p *Policy) control(trusted []netip.AddrPort, network, address string) error {
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return fmt.Errorf("dial %s %s: %w: only TCP and UDP are dialled for a sandbox", network, address, ErrRefused)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w: not an address", address, ErrRefused)
	}
	if slices.Contains(trusted, netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())) {
		return nil
	}
	return p.Check(ap)
}

// Dialer is a dialer with Control set to p's.
func (p *Policy) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
}

// CheckHost refuses a destination a request names (a model endpoint) when
// any address of host on port is refused. A name that does not resolve now
// is let through: every dial is checked again (Control), and admission
// must not fail on a resolver hiccup.
func (p *Policy) CheckHost(ctx context.Context, host string, port uint16) error {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	var addrs []netip.Addr
	switch {
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	default:
		if a, err := netip.ParseAddr(h); err == nil {
			addrs = []netip.Addr{a}
		} else if ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h); err == nil {
			addrs = ips
		}
	}
	for _, a := range addrs {
		if err := p.Check(netip.AddrPortFrom(a, port)); err != nil {
			return fmt.Errorf("%s: %w", host, err)
		}
	}
	return nil
}

// CheckPrefix refuses a request's allowlist range that lies wholly in
// refused space the operator did not open (127.0.0.1/32, 169.254.169.254,
// 10.0.0.0/8): it could open nothing. A range that only overlaps refused
// space (0.0.0.0/0) is fine: it means the internet, and the refused part
// stays refused at dial time.
func (p *Policy) CheckPrefix(pr netip.Prefix) error {
	pr = pr.Masked()
	a := pr.Addr()
	for _, o := range p.allow {
		if o.Overlaps(pr) {
			return nil
		}
	}
	for _, ap := range p.allowTo {
		if pr.Contains(ap.Addr()) {
			return nil
		}
	}
	within := func(ps []netip.Prefix) bool {
		for _, r := range ps {
			if r.Bits() <= pr.Bits() && r.Contains(a) {
				return true
			}
		}
		return false
	}
	if within(Ranges) {
		return fmt.Errorf("%s: %w: loopback, private, link-local or reserved range; the operator can open it with %s", pr, ErrRefused, AllowEnv)
	}
	host, err := p.Host()
	if err == nil && within(host) {
		return fmt.Errorf("%s: %w: the host's own address or connected subnet; the operator can open it with %s", pr, ErrRefused, AllowEnv)
	}
	return nil
}
