package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Peers configures how replicas sharing one store reach each other: a
// request for a session another replica holds is forwarded to that
// replica's advertised URL (internal/peer).
type Peers struct {
	// AdvertiseURL is where the other replicas reach this one; empty:
	// derived at boot from the listening socket and the host name.
	AdvertiseURL string
	// Token is what a forwarding replica presents to the owner, and what
	// this replica requires of a forwarded request; the runner token by
	// default.
	Token string
	// CIDRs are the networks a peer's advertised address may lie in;
	// empty: the same host only (loopback and the host's own addresses).
	CIDRs []netip.Prefix
	// Domains are DNS suffixes (".runner-pods.ns.svc") a peer's advertised
	// host may end with: names the cluster's DNS gives only to the
	// replicas (a StatefulSet's headless Service).
	Domains []string
	// Heartbeat is how often this replica writes its registry row.
	Heartbeat time.Duration
}

func loadAdvertiseURL(l *loader, s *Setting, c *Config) {
	v := l.str(s.Name, "")
	if v == "" {
		return
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		l.fail(fmt.Sprintf("%s=%q is not a base URL; use http(s)://host:port as the other replicas reach this one, e.g. http://runner-0.runner-peers:8765", s.Name, v))
		return
	}
	c.Peers.AdvertiseURL = strings.TrimRight(v, "/")
}

func loadPeerToken(l *loader, s *Setting, c *Config) {
	v := l.str(s.Name, "")
	if v == "" {
		c.Peers.Token = c.HTTP.Token
		return
	}
	if len(v) < 16 {
		l.fail(s.Name + " is too short (under 16 characters); generate one with `openssl rand -hex 32`, the same on every replica")
	}
	c.Peers.Token = v
}

func loadPeerCIDRs(l *loader, s *Setting, c *Config) {
	for _, e := range l.list(s.Name) {
		if strings.HasPrefix(e, ".") {
			if len(e) < 3 || strings.ContainsAny(e, "/:*") || strings.Contains(e, "..") {
				l.fail(fmt.Sprintf("%s entry %q: a DNS suffix starts with a dot and names a domain, e.g. .runner-pods.agenta.svc", s.Name, e))
				continue
			}
			c.Peers.Domains = append(c.Peers.Domains, strings.TrimSuffix(e, "."))
			continue
		}
		p, err := netip.ParsePrefix(e)
		if err != nil {
			if a, aerr := netip.ParseAddr(e); aerr == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			} else {
				l.fail(fmt.Sprintf("%s entry %q: want a CIDR (10.0.0.0/8), an address, or a DNS suffix (.runner-pods.agenta.svc)", s.Name, e))
				continue
			}
		}
		c.Peers.CIDRs = append(c.Peers.CIDRs, p.Masked())
	}
}
