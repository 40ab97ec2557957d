package pgcut

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Cutter makes a pool's connections and can cut them all at once, so
// that the pool's Close does not wait for a server that stopped
// answering. pgx closes a broken connection (a query past its deadline)
// by sending the server a cancel request on a new connection and then
// draining the old one until the server closes it, for up to 15 s each;
// a pool's Close waits for those, so with a stalled server every Close
// took 15 s, past any shutdown timeout. Once cut, every read on the
// pool's connections fails at once and no new one is dialled; writes
// still go out, so a healthy connection still says goodbye (Terminate).
type Cutter struct {
	next pgconn.DialFunc
	cut  atomic.Bool

	// mu guards the following: the open connections.
	mu    sync.Mutex
	conns map[*cutConn]struct{}
}

var errCut = errors.New("the PostgreSQL connection pool is closing")

// New returns a Cutter that dials with next (pgconn.Config.DialFunc as parsed: the
// default dialer with its keepalive).
func New(next pgconn.DialFunc) *Cutter {
	return &Cutter{next: next, conns: map[*cutConn]struct{}{}}
}

// Dial is a pgconn.DialFunc.
func (c *Cutter) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	nc, err := c.next(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &cutConn{Conn: nc, c: c}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut.Load() {
		nc.Close()
		return nil, errCut
	}
	c.conns[cc] = struct{}{}
	return cc, nil
}

// Cut fails every read from now on, those waiting included, and every
// dial. It is for just before the pool's Close.
func (c *Cutter) Cut() {
	c.cut.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for cc := range c.conns {
		// A read that saw the flag unset is in the kernel by now, or
		// will be with a deadline set before this one (pgx sets its
		// drain's first): a deadline in the past ends it either way.
		_ = cc.Conn.SetReadDeadline(time.Now())
	}
}

type cutConn struct {
	net.Conn
	c *Cutter
}

func (cc *cutConn) Read(b []byte) (int, error) {
	if cc.c.cut.Load() {
		return 0, errCut
	}
	return cc.Conn.Read(b)
}

func (cc *cutConn) Close() error {
	cc.c.mu.Lock()
	delete(cc.c.conns, cc)
	cc.c.mu.Unlock()
	return cc.Conn.Close()
}
