package netstack

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/agentrunner/runner/internal/duplextest"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// The proxy's check is on the address it dials, so no spelling of a
// loopback host gets past it: decimal, octal and hex IPv4 forms (which a
// C resolver turns into 127.0.0.1), IPv4-mapped IPv6, the unspecified
// address, localhost. Each CONNECT is refused (403, or 502 when the name
// does not resolve at all), and the loopback listener is never connected
// to: the first connection it accepts afterwards is the test's own.
func TestProxyRefusesLoopbackSpellings(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	hosts := []string{"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1", "[::ffff:127.0.0.1]", "[::1]", "0.0.0.0", "[::]", "localhost", "localhost."}
	var entries []string
	for _, h := range hosts {
		entries = append(entries, net.JoinHostPort(h, port))
	}
	allow, err := ParseAllowlist(append(entries, "0.0.0.0/0", "::/0"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := egress.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var events []map[string]any
	sock := filepath.Join(t.TempDir(), "p.sock")
	p, err := StartProxy(sock, allow, pol.Control, slog.New(slog.DiscardHandler), func(_ string, d map[string]any) { events = append(events, d) })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, h := range hosts {
		target := net.JoinHostPort(h, port)
		if h[0] == '[' {
			target = h + ":" + port
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("CONNECT %s: %v", target, err)
		}
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusBadGateway {
			t.Errorf("CONNECT %s: %d, want 403 or 502", target, resp.StatusCode)
		}
	}
	sentinel, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sentinel.Close()
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if first.RemoteAddr().String() != sentinel.LocalAddr().String() {
		t.Errorf("the loopback listener was connected to through the proxy (from %s)", first.RemoteAddr())
	}
	if len(events) == 0 {
		t.Error("no network.blocked event")
	}
}

// TestProxyStreamsBothWays: a plain HTTP request through the allowlist
// proxy whose body still arrives while the response streams passes whole
// both ways (a proxy that is not full duplex cuts such streams short).
func TestProxyStreamsBothWays(t *testing.T) {
	up := duplextest.Upstream(t)
	allow, err := ParseAllowlist([]string{up.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := egress.New([]string{up.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "p.sock")
	p, err := StartProxy(sock, allow, pol.Control, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tr := &http.Transport{
		Proxy: func(*http.Request) (*url.URL, error) { return &url.URL{Scheme: "http", Host: "proxy"}, nil },
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return new(net.Dialer).DialContext(ctx, "unix", sock)
		},
	}
	defer tr.CloseIdleConnections()
	duplextest.Check(t, &http.Client{Transport: tr}, up.URL+"/stream")
}
