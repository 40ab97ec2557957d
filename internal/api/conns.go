package api

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
)

// ReserveConns is how many connections past the cap are still accepted,
// one request each: /health and /ready are answered, anything else gets
// 503 naming the cap. Past those, a connection is closed at once.
const ReserveConns = 32

// ConnLimiter caps a listener's open connections, so that idle clients
// cannot take every descriptor of the runner.
type ConnLimiter struct {
	net.Listener
	max int

	// mu guards the following.
	mu       sync.Mutex
	open     int // connections Accept handed out and not yet closed
	reserved int // connections handed to the reserve
	closed   bool

	reserve     chan net.Conn
	done        chan struct{} // closed with the limiter
	reserveDone chan struct{} // closed with the reserve's listener
	reserveOnce sync.Once
}

// LimitConns caps ln at max open connections; the connections beyond it
// come out of Reserve, to be served by a ReserveServer.
func LimitConns(ln net.Listener, max int) *ConnLimiter {
	return &ConnLimiter{Listener: ln, max: max, reserve: make(chan net.Conn, ReserveConns), done: make(chan struct{}), reserveDone: make(chan struct{})}
}

// Accept returns the next connection under the cap; one over it goes to
// the reserve, or is closed when the reserve is full too.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		switch {
		case l.open < l.max:
			l.open++
			l.mu.Unlock()
			return &countedConn{Conn: c, release: func() { l.release(&l.open) }}, nil
		case l.reserved < ReserveConns && !l.closed:
			l.reserved++
			l.mu.Unlock()
			l.reserve <- &countedConn{Conn: c, release: func() { l.release(&l.reserved) }} // room: reserved bounds it
		default:
			l.mu.Unlock()
			c.Close()
		}
	}
}

func (l *ConnLimiter) release(n *int) {
	l.mu.Lock()
	*n--
	l.mu.Unlock()
}

// Close closes the listener and the reserve's.
func (l *ConnLimiter) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// Open is the number of connections under the cap now open.
func (l *ConnLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Reserve is the listener of the connections over the cap.
func (l *ConnLimiter) Reserve() net.Listener { return reserveListener{l} }

type reserveListener struct{ l *ConnLimiter }

func (r reserveListener) Accept() (net.Conn, error) {
	select {
	case c := <-r.l.reserve:
		return c, nil
	case <-r.l.done:
		return nil, net.ErrClosed
	case <-r.l.reserveDone:
		return nil, net.ErrClosed
	}
}

func (r reserveListener) Close() error {
	r.l.reserveOnce.Do(func() { close(r.l.reserveDone) })
	return nil
}

func (r reserveListener) Addr() net.Addr { return r.l.Addr() }

// countedConn gives its place back once closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// ReserveServer is the server of the connections over the cap (serve it
// on the limiter's Reserve): one request each with short deadlines,
// /health and /ready answered by h, anything else 503 naming the cap.
func ReserveServer(l *ConnLimiter, h http.Handler) *http.Server {
	full := errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("the runner has its %d connections open (AGENTA_RUNNER_MAX_CONNECTIONS); retry later, reuse connections, or raise AGENTA_RUNNER_MAX_CONNECTIONS", l.max))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && (r.URL.Path == "/health" || r.URL.Path == "/ready") {
				h.ServeHTTP(w, r)
				return
			}
			WriteErr(w, full)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
	}
	srv.SetKeepAlivesEnabled(false)
	return srv
}

// bodyDeadline moves the connection's read deadline forward with every
// read of the request body, so a body that stalls for timeout ends its
// request, while one that keeps coming, however long, is read to its
// end; at the end the deadline is cleared (a stream that follows has
// pings and its own ends).
type bodyDeadline struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	off     bool
}

func withBodyDeadline(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if timeout <= 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
		return // not a connection with deadlines (a test recorder)
	}
	r.Body = &bodyDeadline{ReadCloser: r.Body, rc: rc, timeout: timeout}
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case b.off:
	case err == nil:
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.off = true
		err = errdefs.Invalidf("the request body stalled: nothing came for %s (AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS); send the whole body its Content-Length announces", b.timeout)
	default: // the end, or a broken body
		b.off = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
