package netstack

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// BenchmarkProxyConnect is one CONNECT tunnel through the allowlist proxy
// to a loopback echo server per op: the proxy's dial without a Control
// func ("unchecked", what it did before the egress policy) and with the
// policy's ("checked"), so the dial-time check's cost shows beside it.
//
//	go test -run '^$' -bench ProxyConnect ./internal/sandbox/local/netstack
func BenchmarkProxyConnect(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	target := ln.Addr().String()
	pol, err := egress.New([]string{target}) // the operator opens it
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		control func(string, string, syscall.RawConn) error
	}{{"unchecked", nil}, {"checked", pol.Control}} {
		b.Run(bc.name, func(b *testing.B) {
			allow, err := ParseAllowlist([]string{target})
			if err != nil {
				b.Fatal(err)
			}
			sock := filepath.Join(b.TempDir(), "p.sock")
			p, err := StartProxy(sock, allow, bc.control, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			for b.Loop() {
				c, err := net.Dial("unix", sock)
				if err != nil {
					b.Fatal(err)
				}
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("CONNECT: %v %v", resp, err)
				}
				fmt.Fprint(c, "x")
				if _, err := br.ReadByte(); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
