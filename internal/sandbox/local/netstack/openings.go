package netstack

import (
	"net"
	"net/netip"
	"strings"
)

// Openings turns a sandbox's Spec.Network.Allow (the request's; under
// "on": the model endpoint) into destinations: entries on the host's
// loopback become forwards, other IPs and CIDRs are opened (on their port
// when the entry names one) after the refused ranges, so they open only
// what the policy lets through. Names are not resolved here: a public name
// needs no opening, a private one is the operator's to list
// (AGENTA_RUNNER_LOCAL_NETWORK_ALLOW), and "allowlist" opens names through
// its DNS forwarder.
func Openings(entries []string) (allow []netip.Prefix, allowTo []netip.AddrPort, forwards []string) {
	forwards = LoopbackForwards(entries)
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

// LoopbackForwards are the allowlist's host:port entries on the host's
// loopback (a model server on localhost): the bridge serves each at the
// same address on the sandbox's own loopback.
func LoopbackForwards(allow []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range allow {
		e = strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")
		if i := strings.IndexByte(e, '/'); i >= 0 {
			e = e[:i]
		}
		host, port, err := net.SplitHostPort(e)
		if err != nil || port == "" {
			continue
		}
		if host == "localhost" {
			host = "127.0.0.1"
		}
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() || ip.To4() == nil {
			continue
		}
		addr := net.JoinHostPort(host, port)
		if addr == ProxyListen || seen[addr] {
			continue
		}
		seen[addr] = true
		out = append(out, addr)
	}
	return out
}
