package daytona

import (
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
)

// maxCIDRs is Daytona's limit on networkAllowList entries.
const maxCIDRs = 10

// policy is an egress policy in Daytona's terms, normalised (sorted,
// deduplicated) so two policies compare with ==-like equality.
//
// Daytona filters egress by IPv4 CIDR (networkAllowList) and, in newer
// releases, by domain (domainAllowList). An allowlist entry that is a CIDR
// or an IPv4 address goes to the first, a hostname or *.domain pattern to
// the second: hostnames are not resolved here, because addresses behind a
// name change and a resolved list would silently go stale. Ports cannot be
// expressed, and IPv6 is not filtered by Daytona; both are refused rather
// than widened.
type policy struct {
	blockAll bool
	cidrs    []string
	domains  []string
}

func policyFor(n sandbox.Network) (policy, error) {
	switch n.Mode {
	case "", "on":
		return policy{}, nil
	case "off":
		return policy{blockAll: true}, nil
	case "allowlist":
	default:
		return policy{}, errdefs.Invalidf("network mode %q: want on, off or allowlist", n.Mode)
	}
	var p policy
	for _, raw := range n.Allow {
		e := strings.TrimSpace(raw)
		switch {
		case e == "":
		case strings.Contains(e, "/"):
			pfx, err := netip.ParsePrefix(e)
			if err != nil || !pfx.Addr().Is4() {
				return policy{}, errdefs.Unprocessablef("network allowlist entry %q: daytona filters IPv4 CIDRs, hosts and *.domains only", raw)
			}
			p.cidrs = append(p.cidrs, pfx.Masked().String())
		case net.ParseIP(e) != nil:
			ip := netip.MustParseAddr(e)
			if !ip.Is4() {
				return policy{}, errdefs.Unprocessablef("network allowlist entry %q: daytona does not filter IPv6", raw)
			}
			p.cidrs = append(p.cidrs, ip.String()+"/32")
		case strings.Contains(e, ":"):
			return policy{}, errdefs.Unprocessablef("network allowlist entry %q: daytona cannot restrict ports; list the host alone", raw)
		default:
			p.domains = append(p.domains, strings.ToLower(strings.TrimSuffix(e, ".")))
		}
	}
	p = p.normal()
	if len(p.cidrs) == 0 && len(p.domains) == 0 {
		// An empty allowlist allows nothing; never read it as "open".
		return policy{blockAll: true}, nil
	}
	if len(p.cidrs) > maxCIDRs {
		return policy{}, errdefs.Unprocessablef("network allowlist has %d CIDRs; daytona accepts at most %d", len(p.cidrs), maxCIDRs)
	}
	return p, nil
}

func (p policy) normal() policy {
	slices.Sort(p.cidrs)
	p.cidrs = slices.Compact(p.cidrs)
	slices.Sort(p.domains)
	p.domains = slices.Compact(p.domains)
	if p.blockAll {
		return policy{blockAll: true}
	}
	return p
}

func (p policy) equal(q policy) bool {
	return p.blockAll == q.blockAll && slices.Equal(p.cidrs, q.cidrs) && slices.Equal(p.domains, q.domains)
}

// livePolicy reads the policy a sandbox has.
func livePolicy(sb *apiSandbox) policy {
	split := func(s *string) []string {
		if s == nil {
			return nil
		}
		var out []string
		for _, v := range strings.Split(*s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	p := policy{blockAll: sb.NetworkBlockAll, cidrs: split(sb.NetworkAllowList), domains: split(sb.DomainAllowList)}
	for i, c := range p.cidrs {
		if pfx, err := netip.ParsePrefix(c); err == nil {
			p.cidrs[i] = pfx.Masked().String()
		}
	}
	return p.normal()
}

func (p policy) apply(req *createRequest) {
	req.NetworkBlockAll = p.blockAll
	req.NetworkAllowList = strings.Join(p.cidrs, ",")
	req.DomainAllowList = strings.Join(p.domains, ",")
}

func (p policy) settings() networkSettings {
	return networkSettings{NetworkBlockAll: p.blockAll, NetworkAllowList: strings.Join(p.cidrs, ","), DomainAllowList: strings.Join(p.domains, ",")}
}

func (p policy) String() string {
	switch {
	case p.blockAll:
		return "off"
	case len(p.cidrs) == 0 && len(p.domains) == 0:
		return "on"
	}
	return "allowlist " + strings.Join(append(append([]string(nil), p.cidrs...), p.domains...), ",")
}
