package netstack

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// slirpDNS is slirp4netns's DNS forwarder, the only address in its network
// (10.0.2.0/24, inside the refused 10/8) that a sandbox may reach, and only
// on port 53.
var slirpDNS = netip.MustParseAddr("10.0.2.3")

// Policy is what the in-namespace installer puts into a sandbox's
// network namespace (Stack.Policy makes it). It travels as JSON on the
// installer's stdin.
type Policy struct {
	// Allow are destinations opened on every port, checked before Refuse
	// (the operator's).
	Allow []netip.Prefix `json:"allow,omitempty"`
	// AllowTo are destinations opened on one TCP/UDP port, before Refuse.
	AllowTo []netip.AddrPort `json:"allow_to,omitempty"`
	// Refuse are destinations refused at once: a TCP reset, an ICMP port
	// unreachable for the rest (egress.Ranges and the host's networks).
	Refuse []netip.Prefix `json:"refuse"`
	// Open are the request's ranges, opened after Refuse: 0.0.0.0/0 is
	// the internet, never the host.
	Open []netip.Prefix `json:"open,omitempty"`
	// DenyRest refuses everything not accepted (network "allowlist").
	DenyRest bool `json:"deny_rest,omitempty"`
	// SlirpDNS accepts slirp's DNS forwarder (network "on"; "allowlist"
	// resolves through the runner's forwarder instead).
	SlirpDNS bool `json:"slirp_dns,omitempty"`
	// Dynamic keeps the installer running to add the addresses the runner's
	// DNS forwarder hands out to the sets dns4 and dns6 (network
	// "allowlist"): one JSON array of addresses per stdin line, answered
	// by "ok" on stdout.
	Dynamic bool `json:"dynamic,omitempty"`
}

// The sets of addresses the DNS forwarder resolved for listed names.
var (
	dnsSet4 = &nftables.Set{Name: "dns4", KeyType: nftables.TypeIPAddr}
	dnsSet6 = &nftables.Set{Name: "dns6", KeyType: nftables.TypeIP6Addr}
)

// slirpTap is the device slirp4netns makes in the sandbox.
const slirpTap = "tap0"

// nftTable is the table's name in the sandbox's network namespace.
const nftTable = "runner"

// install adds the policy's table to the network namespace c talks to, in
// one netlink batch: either all of it is in force or none.
func (pol Policy) install(c *nftables.Conn) error {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: nftTable})
	refuse := c.AddChain(&nftables.Chain{Name: "refuse", Table: t})
	c.AddRule(&nftables.Rule{Table: t, Chain: refuse, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
	}})
	c.AddRule(&nftables.Rule{Table: t, Chain: refuse, Exprs: []expr.Any{
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH},
	}})
	accept := nftables.ChainPolicyAccept
	out := c.AddChain(&nftables.Chain{
		Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	add := func(v expr.Any, match ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: append(match, v)})
	}
	acceptV := &expr.Verdict{Kind: expr.VerdictAccept}
	refuseV := &expr.Verdict{Kind: expr.VerdictJump, Chain: "refuse"}

	// The sandbox's own loopback.
	lo := make([]byte, unix.IFNAMSIZ)
	copy(lo, "lo")
	add(acceptV, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo})
	// IPv6 neighbour discovery (router and neighbour solicitation and
	// advertisement, redirect) towards slirp's gateway.
	add(acceptV,
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{137}},
	)
	if pol.SlirpDNS {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(acceptV, toPort(netip.AddrPortFrom(slirpDNS, 53), proto)...)
		}
	}
	if pol.Dynamic {
		for _, set := range []*nftables.Set{dnsSet4, dnsSet6} {
			set.Table = t
			if err := c.AddSet(set, nil); err != nil {
				return err
			}
			family, off, n := byte(unix.NFPROTO_IPV4), uint32(16), uint32(4)
			if set == dnsSet6 {
				family, off, n = unix.NFPROTO_IPV6, 24, 16
			}
			add(acceptV,
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{family}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
				&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			)
		}
	}
	for _, p := range pol.Allow {
		add(acceptV, toPrefix(p)...)
	}
	for _, ap := range pol.AllowTo {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(acceptV, toPort(ap, proto)...)
		}
	}
	for _, p := range pol.Refuse {
		add(refuseV, toPrefix(p)...)
	}
	for _, p := range pol.Open {
		add(acceptV, toPrefix(p)...)
	}
	if pol.DenyRest {
		add(refuseV)
	}
	return c.Flush()
}

// toPrefix matches packets whose destination lies in p.
func toPrefix(p netip.Prefix) []expr.Any {
	// An IPv4-mapped prefix (::ffff:0:0/96) stays IPv6: it matches IPv6
	// packets, and unmapping it would match all of IPv4.
	p = p.Masked()
	addr, bits := p.Addr(), p.Bits()
	family, off := byte(unix.NFPROTO_IPV4), uint32(16)
	if addr.Is6() {
		family, off = unix.NFPROTO_IPV6, 24
	}
	raw := addr.AsSlice()
	mask := net.CIDRMask(bits, len(raw)*8)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{family}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(raw))},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(raw)), Mask: mask, Xor: make([]byte, len(raw))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: raw},
	}
}

// toPort matches packets of proto to ap.
func toPort(ap netip.AddrPort, proto byte) []expr.Any {
	addr := ap.Addr().Unmap()
	m := toPrefix(netip.PrefixFrom(addr, addr.BitLen()))
	return append(m,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(ap.Port() >> 8), byte(ap.Port())}},
	)
}

// SetupCommand is the first argument with which the provider runs its
// own binary (os.Executable), through nsenter, as the installer of a
// sandbox's nftables table: the binary's main must dispatch it to
// SetupMain before anything else, and so must the TestMain of every
// test binary that starts sandboxes with network "on".
const SetupCommand = "sandbox-net-setup"

// SetupEnv marks the installer's environment, so that a binary that
// failed to dispatch SetupCommand refuses to make a provider
// instead of running as itself inside a sandbox's network namespace.
const SetupEnv = "AGENTA_RUNNER_INTERNAL_NET_SETUP"

// SetupMain is the installer (SetupCommand). It runs through
// nsenter inside the sandbox's user namespace (which the runner's uid
// owns, so it needs no privilege in the host's) and network namespace, before the sandbox's command runs; the sandbox itself
// never holds a capability that could change the table. On stdin: the
// policy as one JSON line, then "tap" once slirp4netns made its device.
// It installs the table while slirp4netns starts, then configures IPv6 on
// the device and prints "ready". With a dynamic policy it then adds the
// addresses of each further line, printing "ok" for each.
func SetupMain() int {
	in := bufio.NewScanner(os.Stdin)
	var pol Policy
	if !in.Scan() {
		fmt.Fprintln(os.Stderr, "network policy: none on stdin")
		return 2
	}
	if err := json.Unmarshal(in.Bytes(), &pol); err != nil {
		fmt.Fprintln(os.Stderr, "network policy:", err)
		return 2
	}
	c, err := nftables.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nftables:", err)
		return 1
	}
	if err := pol.install(c); err != nil {
		fmt.Fprintln(os.Stderr, "nftables:", err)
		return 1
	}
	if pol.Dynamic {
		// The bridge, without capabilities, serves the runner's DNS
		// forwarder on port 53 of the sandbox's own loopback.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("53"), 0); err != nil {
			fmt.Fprintln(os.Stderr, "dns port:", err)
			return 1
		}
	}
	if !in.Scan() || in.Text() != "tap" {
		fmt.Fprintln(os.Stderr, "slirp4netns did not come up")
		return 1
	}
	if err := configureIPv6(slirpTap); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	for pol.Dynamic && in.Scan() {
		var addrs []netip.Addr
		if err := json.Unmarshal(in.Bytes(), &addrs); err != nil {
			fmt.Fprintln(os.Stderr, "addresses:", err)
			return 2
		}
		if err := addResolved(c, addrs); err != nil {
			fmt.Fprintln(os.Stderr, "nftables:", err)
			return 1
		}
		fmt.Println("ok")
	}
	return 0
}

// addResolved adds addresses to the dns4 and dns6 sets.
func addResolved(c *nftables.Conn, addrs []netip.Addr) error {
	var v4, v6 []nftables.SetElement
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, nftables.SetElement{Key: a.AsSlice()})
		} else {
			v6 = append(v6, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	for _, x := range []struct {
		set  *nftables.Set
		elem []nftables.SetElement
	}{{dnsSet4, v4}, {dnsSet6, v6}} {
		if len(x.elem) > 0 {
			if err := c.SetAddElements(x.set, x.elem); err != nil {
				return err
			}
		}
	}
	return c.Flush()
}
