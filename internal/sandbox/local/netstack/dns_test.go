package netstack

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzDNSAnswer feeds the forwarder what a sandbox may send it: it never
// panics, and opens only what the resolver returned for a listed name.
func FuzzDNSAnswer(f *testing.F) {
	for _, name := range []string{"listed.test.", "other.test.", "a.sub.listed.test."} {
		q := dnsmessage.Message{Header: dnsmessage.Header{ID: 1}, Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
		b, _ := q.Pack()
		f.Add(b)
	}
	f.Add([]byte{0, 1, 2})
	allow, err := ParseAllowlist([]string{"listed.test", "*.sub.listed.test"})
	if err != nil {
		f.Fatal(err)
	}
	resolved := netip.MustParseAddr("203.0.113.9")
	f.Fuzz(func(t *testing.T, msg []byte) {
		var opened []netip.Addr
		d := &DNSForwarder{
			allow: allow, log: slog.New(slog.DiscardHandler),
			open: func(a []netip.Addr) error { opened = append(opened, a...); return nil },
			lookup: func(_ context.Context, _, host string) ([]netip.Addr, error) {
				if !allow.allowsName(host) {
					t.Fatalf("resolved unlisted %q", host)
				}
				return []netip.Addr{resolved}, nil
			},
		}
		out := d.answer(msg)
		for _, a := range opened {
			if a != resolved {
				t.Fatalf("opened %v", a)
			}
		}
		if out != nil {
			var m dnsmessage.Message
			if err := m.Unpack(out); err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
		}
	})
}
