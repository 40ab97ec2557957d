package netstack

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
)

// Allowlist is a parsed sandbox request allowlist (Spec.Network.Allow and
// the runner's own services): what the proxy and the DNS forwarder admit.
// Entries are:
//
//	example.com          that host, any port
//	*.example.com        any subdomain of example.com (not example.com itself)
//	10.0.0.0/8           any IP literal in the prefix
//	203.0.113.7          that IP
//	example.com:443      that host on that port only (also *.d:p, [v6]:p, ip:p)
//	https://example.com  a URL: its host, and its port when the URL names one
//
// Hosts are matched by the name the client asked the proxy for; a name is
// not resolved to check it against prefixes, so a prefix only admits IP
// literals.
type Allowlist struct{ rules []rule }

type rule struct {
	host   string       // lowercase exact host, or suffix ".example.com" for a wildcard
	prefix netip.Prefix // valid for IP and CIDR rules
	port   int          // 0: any
}

// ParseAllowlist parses entries; an entry that is none of the above fails
// it as invalid (errdefs.ErrInvalid), naming the entry.
func ParseAllowlist(entries []string) (*Allowlist, error) {
	a := &Allowlist{}
	for _, e := range entries {
		r, err := parseRule(strings.TrimSpace(e))
		if err != nil {
			return nil, errdefs.Invalidf("sandboxPermission.network.allow %q: %v", e, err)
		}
		a.rules = append(a.rules, r)
	}
	return a, nil
}

func parseRule(e string) (rule, error) {
	var r rule
	if e == "" {
		return r, errString("empty entry")
	}
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil || u.Hostname() == "" {
			return r, errString("not a URL with a host")
		}
		e = u.Host
	}
	if p, err := netip.ParsePrefix(e); err == nil {
		r.prefix = p.Masked()
		return r, nil
	}
	if ip, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
		r.prefix = netip.PrefixFrom(ip, ip.BitLen())
		return r, nil
	}
	host := e
	if h, p, err := net.SplitHostPort(e); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return r, errString("bad port")
		}
		host, r.port = h, n
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		r.prefix = netip.PrefixFrom(ip, ip.BitLen())
		return r, nil
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host = "." + rest
	}
	if host == "" || host == "." || strings.ContainsAny(host, "/*@ ") {
		return r, errString("not a host, *.domain, CIDR or host:port")
	}
	r.host = host
	return r, nil
}

// allows reports whether the proxy may connect to host:port.
func (a *Allowlist) allows(host string, port int) bool {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	ip, ipErr := netip.ParseAddr(host)
	for _, r := range a.rules {
		if r.port != 0 && r.port != port {
			continue
		}
		switch {
		case r.prefix.IsValid():
			if ipErr == nil && r.prefix.Contains(ip.Unmap()) {
				return true
			}
		case r.names(host):
			return true
		}
	}
	return false
}

// names reports whether a host rule matches the lowercase host.
func (r rule) names(host string) bool {
	if strings.HasPrefix(r.host, ".") {
		return strings.HasSuffix(host, r.host) && len(host) > len(r.host)
	}
	return r.host != "" && r.host == host
}

type errString string

func (e errString) Error() string { return string(e) }

// allowsName reports whether a rule names host, on any port: the DNS
// forwarder resolves it (the table then opens its addresses).
func (a *Allowlist) allowsName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, r := range a.rules {
		if !r.prefix.IsValid() && r.names(host) {
			return true
		}
	}
	return false
}
