package netstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// ProxyListen is where the in-sandbox bridge listens; the sandbox has its
// own network namespace, so the port never clashes.
const ProxyListen = "127.0.0.1:3128"

// ProxyEnv points HTTP clients in the sandbox at the bridge.
func ProxyEnv() []string {
	u := "http://" + ProxyListen
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}

// Proxy is the host side of network mode "allowlist": an HTTP proxy
// (CONNECT for TLS, absolute-URI requests for plain HTTP) on a unix socket
// that is bind-mounted into the sandbox. The sandbox's network namespace
// has only loopback, so this is its only way out. Under mode "on" it
// serves the bridge's forwards to the host's loopback only.
type Proxy struct {
	path    string
	allow   *Allowlist
	log     *slog.Logger
	onEvent func(string, map[string]any)
	srv     *http.Server
	rp      *httputil.ReverseProxy
	dialer  net.Dialer

	// wg counts the serve loop and the CONNECT tunnels.
	wg sync.WaitGroup
	// mu guards the following.
	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
}

// StartProxy serves allow on the unix socket path; control checks every
// address the proxy dials, after resolution (egress.Policy), so a listed
// name that resolves to a refused address is refused. A refusal is logged
// and reported to onEvent (nil: none) as "network.blocked". The caller
// closes it.
func StartProxy(path string, allow *Allowlist, control func(network, address string, c syscall.RawConn) error, log *slog.Logger, onEvent func(string, map[string]any)) (*Proxy, error) {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("allowlist proxy: %w", err)
	}
	p := &Proxy{
		path: path, allow: allow, log: log, onEvent: onEvent,
		dialer:  net.Dialer{Timeout: 30 * time.Second, Control: control},
		tunnels: map[net.Conn]struct{}{},
	}
	p.rp = &httputil.ReverseProxy{
		// The request already carries the absolute URL it is for.
		Rewrite:   func(*httputil.ProxyRequest) {},
		Transport: &http.Transport{Proxy: nil, DialContext: p.dialer.DialContext, ForceAttemptHTTP2: false},
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if p.refused(w, r.URL.Host, err) {
				return
			}
			http.Error(w, "proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	p.wg.Go(func() { _ = p.srv.Serve(ln) })
	return p, nil
}

// ServeHTTP implements http.Handler: a CONNECT tunnel or a plain HTTP
// request, to a destination the allowlist admits.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var host string
	var port int
	if r.Method == http.MethodConnect {
		h, ps, err := net.SplitHostPort(r.Host)
		if err != nil {
			http.Error(w, "CONNECT needs host:port", http.StatusBadRequest)
			return
		}
		host, port = h, atoiPort(ps)
	} else {
		if r.URL.Scheme != "http" || r.URL.Host == "" {
			http.Error(w, "this is a proxy: send an absolute http:// URL or CONNECT", http.StatusBadRequest)
			return
		}
		host, port = r.URL.Hostname(), 80
		if ps := r.URL.Port(); ps != "" {
			port = atoiPort(ps)
		}
	}
	if !p.allow.allows(host, port) {
		p.log.Info("network blocked", "host", host, "port", port)
		if p.onEvent != nil {
			p.onEvent("network.blocked", map[string]any{"host": host, "port": port})
		}
		http.Error(w, "blocked by the sandbox network allowlist: "+host, http.StatusForbidden)
		return
	}
	if r.Method != http.MethodConnect {
		// Full duplex, or the response's first write closes a request
		// body the transport may still be sending, and the upstream
		// connection is cut mid-response.
		_ = http.NewResponseController(w).EnableFullDuplex()
		p.rp.ServeHTTP(w, r)
		return
	}
	p.tunnel(w, r)
}

func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := p.dialer.DialContext(r.Context(), "tcp", r.Host)
	if err != nil {
		if p.refused(w, r.Host, err) {
			return
		}
		p.log.Debug("proxy dial", "host", r.Host, logkey.Error, err)
		http.Error(w, "dial "+r.Host+": "+err.Error(), http.StatusBadGateway)
		return
	}
	down, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(up, down) {
		up.Close()
		down.Close()
		return
	}
	defer p.untrack(up, down)
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// Bytes the client sent after the CONNECT head are in buf.
		_, _ = io.Copy(up, buf)
		closeWrite(up)
	})
	_, _ = io.Copy(down, up)
	closeWrite(down)
	wg.Wait()
}

// refused answers 403 when the dial was refused by the egress policy (a
// listed name resolved to a refused address, a listed range covered one).
func (p *Proxy) refused(w http.ResponseWriter, target string, err error) bool {
	if !errors.Is(err, egress.ErrRefused) {
		return false
	}
	p.log.Info("network blocked", "target", target, logkey.Error, err)
	if p.onEvent != nil {
		p.onEvent("network.blocked", map[string]any{"host": target, "reason": "refused address"})
	}
	http.Error(w, "blocked by the sandbox network policy: "+err.Error(), http.StatusForbidden)
	return true
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.tunnels, c)
	}
}

// Path is the proxy's socket, to bind into the sandbox.
func (p *Proxy) Path() string { return p.path }

// Allowlist is what the proxy admits.
func (p *Proxy) Allowlist() *Allowlist { return p.allow }

// Close stops the proxy and returns once every connection is gone.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	_ = p.srv.Close()
	p.wg.Wait()
	_ = os.Remove(p.path)
}

func atoiPort(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// BridgeMain is the in-sandbox half of network mode "allowlist"; the
// runner mounts it as a hidden subcommand and names it in the local
// provider's Config.ProxyBridge. args are: SOCKET LISTEN -- COMMAND [ARG...]. It
// listens on LISTEN (loopback TCP, what HTTP_PROXY points to), relays every
// connection to the host proxy at SOCKET, runs COMMAND with its own stdio
// and environment, and exits with COMMAND's status. A Go helper rather than
// socat: the sandbox needs no extra package and the runner binary is
// already there.
func BridgeMain(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: SOCKET LISTEN [--forward HOST:PORT]... [--dns SOCKET] -- COMMAND [ARG...]")
		return 2
	}
	sock, listen := args[0], args[1]
	rest := args[2:]
	var forwards []string
	dnsSock := ""
	for len(rest) >= 2 && (rest[0] == "--forward" || rest[0] == "--dns") {
		if rest[0] == "--dns" {
			dnsSock = rest[1]
		} else {
			forwards = append(forwards, rest[1])
		}
		rest = rest[2:]
	}
	if len(rest) < 2 || rest[0] != "--" {
		fmt.Fprintln(os.Stderr, "usage: SOCKET LISTEN [--forward HOST:PORT]... [--dns SOCKET] -- COMMAND [ARG...]")
		return 2
	}
	argv := rest[1:]
	var wg sync.WaitGroup
	var listeners []net.Listener
	if listen != "-" { // "-": forwards only (network "on")
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxy bridge:", err)
			return 1
		}
		listeners = append(listeners, ln)
		wg.Go(func() { acceptBridge(ln, sock, "") })
	}
	// Allowlisted services on the host's loopback (a local model server)
	// appear on the sandbox's own loopback at the same address, tunnelled
	// through the proxy, so programs that ignore HTTP_PROXY reach them too.
	for _, addr := range forwards {
		fl, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxy bridge: forward", addr+":", err)
			continue
		}
		listeners = append(listeners, fl)
		wg.Go(func() { acceptBridge(fl, sock, addr) })
	}
	var dnsUDP net.PacketConn
	if dnsSock != "" {
		// The runner's DNS forwarder, over UDP and TCP (framed the same).
		var err error
		if dnsUDP, err = net.ListenPacket("udp", dnsListen); err != nil {
			fmt.Fprintln(os.Stderr, "proxy bridge: dns:", err)
			return 1
		}
		wg.Go(func() { serveDNSUDP(dnsUDP, dnsSock) })
		tl, err := net.Listen("tcp", dnsListen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxy bridge: dns:", err)
			return 1
		}
		listeners = append(listeners, tl)
		wg.Go(func() { acceptBridge(tl, dnsSock, "") })
	}
	code := runChild(argv)
	if dnsUDP != nil {
		dnsUDP.Close()
	}
	// The process exits next; closing the listeners ends the accept loops,
	// and open relays die with the sandbox.
	for _, l := range listeners {
		l.Close()
	}
	wg.Wait()
	return code
}

func acceptBridge(ln net.Listener, sock, connect string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go relay(c, sock, connect)
	}
}

// relay splices c to the proxy socket; with connect set, it first opens a
// CONNECT tunnel to that address, so c speaks straight to it.
func relay(c net.Conn, sock, connect string) {
	defer c.Close()
	var d net.Dialer
	up, err := d.DialContext(context.Background(), "unix", sock)
	if err != nil {
		return
	}
	defer up.Close()
	if connect != "" {
		if _, err := fmt.Fprintf(up, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", connect, connect); err != nil {
			return
		}
		br := bufio.NewReader(up)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			return
		}
		if br.Buffered() > 0 {
			b, _ := br.Peek(br.Buffered())
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		closeWrite(up)
		close(done)
	}()
	_, _ = io.Copy(c, up)
	closeWrite(c)
	<-done
}
