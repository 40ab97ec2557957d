package tools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// ErrBlocked marks a user MCP server URL the SSRF guard refuses.
var ErrBlocked = errors.New("destination blocked")

// Resolver looks up a host's addresses; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// guard decides which user MCP servers a request may name: any public
// https address, and anything at all on an allowlisted host.
type guard struct {
	allow    map[string]bool
	resolver Resolver
}

func newGuard(allowlist []string, r Resolver) *guard {
	g := &guard{allow: map[string]bool{}, resolver: r}
	for _, h := range allowlist {
		if h = normHost(h); h != "" {
			g.allow[h] = true
		}
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	return g
}

func normHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

func (g *guard) allowed(host string) bool { return g.allow[normHost(host)] }

// resolve returns host's addresses, or an error wrapping ErrBlocked when
// the host is a localhost name or any address is blocked.
func (g *guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	h := normHost(host)
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return nil, fmt.Errorf("host %s: %w (localhost)", host, ErrBlocked)
	}
	addrs, err := g.lookup(ctx, h)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if blocked(a) {
			return nil, fmt.Errorf("host %s resolves to %s: %w (private, loopback, link-local or reserved address)", host, a, ErrBlocked)
		}
	}
	return addrs, nil
}

func (g *guard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	return addrs, nil
}

// dialContext dials addr for the callback's HTTP transport. The callback
// is the platform's own API (compose "api:8000", a cluster service
// address): it is trusted, so no address is refused. The host is resolved
// here, at call time, through the configured resolver, so a host that does
// not resolve costs only the calls that need it, each a tool error.
func (g *guard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	addrs, err := g.lookup(ctx, normHost(host))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// mcpExtra are refused for user MCP servers beyond the sandbox egress
// policy's ranges (egress.Ranges: loopback, private, link-local, CGNAT,
// multicast, reserved, and their IPv6, IPv4-mapped, IPv4-compatible and
// NAT64 forms): the documentation and special-purpose ranges, which make
// the whole mirror Python's is_private plus multicast (docs/contract.md, Tools).
var mcpExtra = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",
		"100::/64", "2001::/23", "2001:db8::/32",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// blocked reports whether a is not a public unicast address. IPv4-mapped
// addresses are judged by their IPv4 address; IPv4-compatible ones
// (deprecated) are refused.
func blocked(a netip.Addr) bool {
	if egress.Reserved(a) {
		return true
	}
	a = a.Unmap()
	for _, p := range mcpExtra {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
