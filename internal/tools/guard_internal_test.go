package tools

import (
	"net/netip"
	"testing"
)

func TestBlocked(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "100.64.0.1", "127.0.0.1", "169.254.169.254", "172.16.0.1",
		"192.0.0.170", "192.0.2.1", "192.168.1.1", "198.18.0.1", "198.51.100.1", "203.0.113.1",
		"224.0.0.1", "240.0.0.1", "255.255.255.255",
		"::", "::1", "fe80::1", "fc00::1", "fd12::1", "ff02::1", "100::1", "2001:db8::1", "2001:10::1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1", "::10.0.0.1", "fec0::1",
	} {
		if !blocked(netip.MustParseAddr(s)) {
			t.Errorf("blocked(%s) = false, want true", s)
		}
	}
	for _, s := range []string{"93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"} {
		if blocked(netip.MustParseAddr(s)) {
			t.Errorf("blocked(%s) = true, want false", s)
		}
	}
}
