package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// CIDRsEnv is the setting that opens peer networks beyond this host.
const CIDRsEnv = "AGENTA_RUNNER_PEER_CIDRS"

// ErrNotPeer marks an address outside the peer networks.
var ErrNotPeer = errors.New("not a peer address")

// hostRefresh is how long the host's addresses are reused before they are
// read again: every dial checks them.
const hostRefresh = time.Second

// Network decides which addresses a peer may be dialled at: the
// operator's CIDRs, loopback, and this host's own interface addresses
// (not their subnets: a neighbour is not this host), checked on the
// address dialled; and names under the operator's peer domains (a
// StatefulSet's headless Service), which the cluster's DNS gives only to
// the replicas.
type Network struct {
	cidrs   []netip.Prefix
	domains []string // ".runner-pods.ns.svc"
	// hostAddrs reads the host's addresses; now is the clock of its cache.
	hostAddrs func() ([]netip.Addr, error)
	now       func() time.Time

	// mu guards the following: the cache of the host's addresses.
	mu     sync.Mutex
	host   []netip.Addr
	hostAt time.Time
}

// NewNetwork returns the policy of the peer networks cidrs and the peer
// domains (both empty: this host only).
func NewNetwork(cidrs []netip.Prefix, domains []string) *Network {
	return &Network{cidrs: slices.Clone(cidrs), domains: slices.Clone(domains), hostAddrs: interfaceAddrs, now: time.Now}
}

// inDomain reports whether host is a name under one of the peer domains.
func (n *Network) inDomain(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, d := range n.domains {
		if strings.HasSuffix(host, d) && len(host) > len(d) {
			return true
		}
	}
	return false
}

// Dialer returns the dial func of peer connections: a host under a peer
// domain is dialled where the DNS resolves it (but never at a link-local,
// multicast or unspecified address: the metadata endpoint is no peer);
// any other host only at an address Check admits, checked on the address
// dialled, so a name that resolves (or rebinds) elsewhere is refused.
func (n *Network) Dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	checked := &net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second, Control: n.Control}
	named := &net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second, Control: controlNamed}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err == nil && n.inDomain(host) {
			return named.DialContext(ctx, network, addr)
		}
		return checked.DialContext(ctx, network, addr)
	}
}

func controlNamed(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w: not an address", address, ErrNotPeer)
	}
	a := ap.Addr().Unmap()
	if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || a.IsInterfaceLocalMulticast() {
		return fmt.Errorf("%s: %w: a peer domain's name resolved to a link-local, multicast or unspecified address", a, ErrNotPeer)
	}
	return nil
}

// Check returns nil when a may be dialled as a peer, else an error
// wrapping ErrNotPeer that names the setting to change.
func (n *Network) Check(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	if a.IsLoopback() {
		return nil
	}
	for _, p := range n.cidrs {
		if p.Contains(a) {
			return nil
		}
	}
	host, err := n.hostAddrsCached()
	if err != nil {
		return fmt.Errorf("%s: %w: %v (the host's own addresses could not be read)", a, ErrNotPeer, err)
	}
	if slices.Contains(host, a) {
		return nil
	}
	return fmt.Errorf("%s: %w: neither this host nor in %s", a, ErrNotPeer, CIDRsEnv)
}

// Control is a net.Dialer.Control func: it sees the address actually
// dialled, after resolution, so a name in a row that resolves (or
// rebinds) outside the peer networks is refused too.
func (n *Network) Control(network, address string, _ syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return fmt.Errorf("dial %s %s: %w: peers are reached over TCP only", network, address, ErrNotPeer)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w: not an address", address, ErrNotPeer)
	}
	return n.Check(ap.Addr())
}

func (n *Network) hostAddrsCached() ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if now := n.now(); n.host == nil || now.Sub(n.hostAt) >= hostRefresh || now.Before(n.hostAt) {
		addrs, err := n.hostAddrs()
		if err != nil {
			return nil, err
		}
		n.host, n.hostAt = addrs, now
	}
	return n.host, nil
}

func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("the host's addresses: %w", err)
	}
	out := []netip.Addr{}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
