package storetest

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to PostgreSQL on loopback, and breaks
// them on demand: ResetNext resets the connection that next carries a
// message to the server; Stall stops forwarding on every connection,
// open or new, keeping them open (a server that stopped answering);
// Close ends every connection, as a server that went away.
type Proxy struct {
	ln      net.Listener
	target  string
	closing chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	// mu guards the following.
	mu      sync.Mutex
	reset   bool
	stalled chan struct{} // closed by Stall
	conns   map[net.Conn]struct{}
}

// NewProxy listens on loopback and forwards to target (host:port) until
// Close or the end of tb.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, closing: make(chan struct{}), stalled: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		select {
		case <-p.closing: // accepted as Close ran: it has closed the others
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		default:
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, true)
		go p.pipe(s, c, false)
	}
}

// pipe copies src to dst until either closes, minding reset (on the way
// to the server) and stall.
func (p *Proxy) pipe(src, dst net.Conn, toServer bool) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		reset := toServer && p.reset
		p.reset = p.reset && !reset
		stalled := p.stalled
		p.mu.Unlock()
		if reset {
			for _, c := range []net.Conn{src, dst} {
				_ = c.(*net.TCPConn).SetLinger(0) // close with RST
			}
			return
		}
		select {
		case <-stalled:
			<-p.closing // kept open, never forwarded
			return
		default:
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// ResetNext resets the next connection to send the server a message.
func (p *Proxy) ResetNext() {
	p.mu.Lock()
	p.reset = true
	p.mu.Unlock()
}

// Stall stops forwarding for good; connections stay open.
func (p *Proxy) Stall() {
	p.mu.Lock()
	close(p.stalled)
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. It may be called more than once.
func (p *Proxy) Close() {
	p.once.Do(func() {
		close(p.closing)
		p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}

// ProxiedSchema is PostgresSchema reached through a Proxy: the URL names
// the proxy's address.
func ProxiedSchema(tb testing.TB) (*Proxy, string) {
	tb.Helper()
	dsn := PostgresSchema(tb)
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("%s must be a postgres:// URL here: %v", PostgresURLEnv, err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := NewProxy(tb, host)
	u.Host = p.Addr()
	return p, u.String()
}
