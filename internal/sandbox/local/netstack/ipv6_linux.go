package netstack

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// slirp4netns's IPv6 network: the sandbox takes slirpGuest6 in fd00::/64
// and routes through slirp's gateway fd00::2.
var (
	slirpGuest6   = netip.MustParseAddr("fd00::100")
	slirpGateway6 = netip.MustParseAddr("fd00::2")
)

// configureIPv6 gives the tap device its IPv6 address and default route
// statically. slirp4netns leaves IPv6 to router advertisements, and
// autoconfiguration plus duplicate address detection take a second or more,
// so a sandbox's first IPv6 connection would fail. Runs in the sandbox's
// network namespace, with CAP_NET_ADMIN there.
func configureIPv6(ifname string) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("ipv6: %w", err)
	}
	c, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return fmt.Errorf("ipv6: %w", err)
	}
	defer c.Close()
	idx := make([]byte, 4)
	binary.NativeEndian.PutUint32(idx, uint32(ifi.Index))

	// struct ifaddrmsg: family, prefixlen, flags, scope, index.
	addr := append([]byte{unix.AF_INET6, 64, 0, unix.RT_SCOPE_UNIVERSE}, idx...)
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(unix.IFA_LOCAL, slirpGuest6.AsSlice())
	ae.Bytes(unix.IFA_ADDRESS, slirpGuest6.AsSlice())
	ae.Uint32(unix.IFA_FLAGS, unix.IFA_F_NODAD)
	if err := request(c, unix.RTM_NEWADDR, addr, ae); err != nil {
		return fmt.Errorf("ipv6 address: %w", err)
	}
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope,
	// type, flags.
	route := []byte{unix.AF_INET6, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST, 0, 0, 0, 0}
	ae = netlink.NewAttributeEncoder()
	ae.Bytes(unix.RTA_GATEWAY, slirpGateway6.AsSlice())
	ae.Uint32(unix.RTA_OIF, uint32(ifi.Index))
	if err := request(c, unix.RTM_NEWROUTE, route, ae); err != nil {
		return fmt.Errorf("ipv6 default route: %w", err)
	}
	return nil
}

func request(c *netlink.Conn, typ netlink.HeaderType, head []byte, ae *netlink.AttributeEncoder) error {
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Replace},
		Data:   append(head, attrs...),
	})
	return err
}
