package netstack

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsListen is where the bridge serves the runner's DNS forwarder inside
// an "allowlist" sandbox; its /etc/resolv.conf names it.
const dnsListen = "127.0.0.53:53"

// DNSForwarder is the runner's DNS server for one "allowlist" sandbox with
// an isolated network, on a unix socket bound into it (the bridge relays
// port 53 of the sandbox's loopback to it). It answers A and AAAA queries
// for listed names only, from the host's resolver, and before answering
// opens the addresses it returns in the sandbox's table, so programs that
// ignore HTTP_PROXY (ssh, database clients) reach listed hosts too. An
// address is opened on every port and for every name that shares it (a
// CDN's address opens to all its tenants).
type DNSForwarder struct {
	path    string
	ln      net.Listener
	allow   *Allowlist
	log     *slog.Logger
	onEvent func(string, map[string]any)
	// open adds addresses to the sandbox's tables.
	open func([]netip.Addr) error
	// lookup is the host's resolver.
	lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

// StartDNS serves allow's names on the unix socket path. open must open the
// addresses it is given in the sandbox's tables before it returns: the
// answer that hands them out is sent after it. A name not listed gets
// NXDOMAIN, logged and reported to onEvent (nil: none) as
// "network.blocked". The caller closes it.
func StartDNS(path string, allow *Allowlist, log *slog.Logger, onEvent func(string, map[string]any), open func([]netip.Addr) error) (*DNSForwarder, error) {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	d := &DNSForwarder{path: path, ln: ln, allow: allow, log: log, onEvent: onEvent, open: open, lookup: net.DefaultResolver.LookupNetIP, conns: map[net.Conn]struct{}{}}
	d.wg.Go(d.accept)
	return d, nil
}

func (d *DNSForwarder) accept() {
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		if d.done {
			d.mu.Unlock()
			c.Close()
			return
		}
		d.conns[c] = struct{}{}
		d.mu.Unlock()
		d.wg.Go(func() {
			defer func() {
				d.mu.Lock()
				delete(d.conns, c)
				d.mu.Unlock()
				c.Close()
			}()
			d.serve(c)
		})
	}
}

// serve answers DNS-over-TCP framed queries (a two-byte length, then the
// message) until the connection ends.
func (d *DNSForwarder) serve(c net.Conn) {
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		reply := d.answer(msg)
		if reply == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(reply)))
		if _, err := c.Write(append(out, reply...)); err != nil {
			return
		}
	}
}

// answer builds the reply to one query; nil for garbage.
func (d *DNSForwarder) answer(msg []byte) []byte {
	var q dnsmessage.Message
	if err := q.Unpack(msg); err != nil || len(q.Questions) != 1 {
		return nil
	}
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: q.ID, Response: true, RecursionDesired: q.RecursionDesired, RecursionAvailable: true},
		Questions: q.Questions,
	}
	qq := q.Questions[0]
	name := strings.TrimSuffix(qq.Name.String(), ".")
	if !d.allow.allowsName(name) {
		d.log.Info("network blocked", "host", name, "via", "dns")
		if d.onEvent != nil {
			d.onEvent("network.blocked", map[string]any{"host": name, "via": "dns"})
		}
		resp.RCode = dnsmessage.RCodeNameError
		out, _ := resp.Pack()
		return out
	}
	network := ""
	switch qq.Type {
	case dnsmessage.TypeA:
		network = "ip4"
	case dnsmessage.TypeAAAA:
		network = "ip6"
	}
	if network != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ips, err := d.lookup(ctx, network, name)
		cancel()
		var dnsErr *net.DNSError
		switch {
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			// No records of this family: an empty answer, not NXDOMAIN,
			// which would deny the other family's records too.
		case err != nil:
			resp.RCode = dnsmessage.RCodeServerFailure
		default:
			if err := d.open(ips); err != nil {
				d.log.Warn("dns forwarder: open resolved addresses", "host", name, "error", err)
				resp.RCode = dnsmessage.RCodeServerFailure
				break
			}
			for _, ip := range ips {
				h := dnsmessage.ResourceHeader{Name: qq.Name, Class: dnsmessage.ClassINET, TTL: 60}
				ip = ip.Unmap()
				if ip.Is4() {
					h.Type = dnsmessage.TypeA
					resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: h, Body: &dnsmessage.AResource{A: ip.As4()}})
				} else {
					h.Type = dnsmessage.TypeAAAA
					resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: h, Body: &dnsmessage.AAAAResource{AAAA: ip.As16()}})
				}
			}
		}
	}
	// Other types get an empty answer: the name exists, nothing else is
	// served.
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}

// Path is the forwarder's socket, to bind into the sandbox.
func (d *DNSForwarder) Path() string { return d.path }

// Close stops the forwarder and waits for its connections.
func (d *DNSForwarder) Close() {
	d.mu.Lock()
	if d.done {
		d.mu.Unlock()
		return
	}
	d.done = true
	for c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.ln.Close()
	d.wg.Wait()
	_ = os.Remove(d.path)
}

// serveDNSUDP is the bridge's half: each datagram on pc goes to the
// forwarder at sock, framed, and the reply back to its sender.
func serveDNSUDP(pc net.PacketConn, sock string) {
	b := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(b)
		if err != nil {
			return
		}
		q := append(binary.BigEndian.AppendUint16(nil, uint16(n)), b[:n]...)
		go func() {
			c, err := net.DialTimeout("unix", sock, 5*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			if _, err := c.Write(q); err != nil {
				return
			}
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			reply := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, reply); err != nil {
				return
			}
			_, _ = pc.WriteTo(reply, from)
		}()
	}
}
