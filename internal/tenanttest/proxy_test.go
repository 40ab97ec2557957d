package tenanttest

import (
	"net"
	"sync"
	"testing"
)

// tcpProxy is a TCP proxy on loopback the test controls: it forwards
// every connection to its target, and can hold every byte in flight
// (Pause, Resume: a partition that heals, connections left open) or
// refuse connections (Cut: the address answers nothing), or close the
// connections open now at their next bytes, unforwarded (DropIdle: a
// server closing idle keep-alive connections). Its goroutines end when
// the test does.
type tcpProxy struct {
	Addr string
	ln   net.Listener
	wg   sync.WaitGroup

	// mu guards the following.
	mu     sync.Mutex
	target string
	paused bool
	resume chan struct{} // closed by Resume
	conns  map[net.Conn]struct{}
	idle   map[net.Conn]bool // connections DropIdle marked
	closed bool
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{Addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// SetTarget points new connections at target.
func (p *tcpProxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(c, target) })
	}
}

func (p *tcpProxy) serve(c net.Conn, target string) {
	defer p.drop(c)
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.drop(up)
	var wg sync.WaitGroup
	wg.Go(func() {
		if p.pipe(up, c) {
			c.Close() // dropped: the client sees its connection closed
		}
		up.Close()
	})
	p.pipe(c, up)
	c.Close()
	wg.Wait()
}

// pipe copies src to dst, holding each chunk while the proxy is paused.
// It reports whether it dropped a chunk of a connection DropIdle marked.
func (p *tcpProxy) pipe(dst, src net.Conn) (dropped bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			wait := p.resume
			paused := p.paused
			drop := p.idle[src]
			delete(p.idle, src)
			p.mu.Unlock()
			if drop {
				return true
			}
			if paused {
				<-wait
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return false // EOF or closed: the caller closes the other side
		}
	}
}

// DropIdle marks the connections open now: the next bytes one carries
// are not forwarded, and the connection is closed on both sides, as a
// server closes an idle keep-alive connection just as a request comes.
// Connections opened later pass as before.
func (p *tcpProxy) DropIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = map[net.Conn]bool{}
	for c := range p.conns {
		p.idle[c] = true
	}
}

func (p *tcpProxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Pause holds every byte from now on, in both directions, on every
// connection; nothing is closed.
func (p *tcpProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused, p.resume = true, make(chan struct{})
	}
}

// Resume lets the held bytes and what follows through.
func (p *tcpProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}

// Cut closes the listener and every connection: the address refuses
// connections from now on.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
}

func (p *tcpProxy) close() {
	p.Resume()
	p.Cut()
	p.wg.Wait()
}
