package sandboxd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
)

// Channels carry a byte stream from a process inside the sandbox to the
// runner (the tool relay `runner mcp-stdio` is the first user). The runner
// cannot be dialed from the sandbox, and the provider's proxy only carries
// requests from the runner to the daemon, so the connection is made in two
// halves that meet in the daemon:
//
//   - the in-sandbox process dials the daemon's unix socket (Dial), with a
//     channel name, and gets a raw full-duplex connection (HTTP/1.1 upgrade,
//     which is easy on a local socket);
//   - the runner long-polls GET /v1/channels/accept?name=… on the HTTP API
//     and receives the new connection's entry id; from then on the
//     connection is an entry like a process: the runner writes to it with
//     POST /v1/entries/{id}/input and reads it with the resumable
//     GET /v1/entries/{id}/events, and kill closes it.
//
// Only the runner's half crosses the proxy, and it reuses the resumable,
// retry-safe process machinery, so a dropped proxy connection loses nothing.

// dialUpgrade is the Upgrade token of a dial on the unix socket.
const dialUpgrade = "sandboxd-channel"

// SocketEnv names the environment variable through which a process in
// the sandbox learns the unix socket to Dial (Health.Socket). The daemon
// does not add it: a process gets exactly the environment the runner
// sends, so the runner adds it where a process needs it.
const SocketEnv = "RUNNER_SANDBOXD_SOCKET"

// connWriter adapts a connection's write half to the entry's input, so
// closing the input half-closes the connection rather than dropping it.
type connWriter struct{ c net.Conn }

func (w connWriter) Write(p []byte) (int, error) { return w.c.Write(p) }
func (w connWriter) Close() error {
	if cw, ok := w.c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// newChannel wraps a dialed connection as an entry; wg owns the goroutine
// that relays it.
func newChannel(id string, c net.Conn, rd *bufio.Reader, maxBuf int, wg *sync.WaitGroup) *entry {
	e := &entry{id: id, out: newEventLog(maxBuf), in: connWriter{c}, done: make(chan struct{})}
	e.kill = func() { _ = c.Close() }
	ctx, cancel := context.WithCancel(context.Background())
	wg.Go(func() {
		defer cancel()
		pump(ctx, e, "stdout", rd)
		_ = c.Close()
		e.exit = ExitStatus{Code: 0}
		e.out.finish(e.exit)
		close(e.done)
	})
	return e
}

// Dial opens a channel named name to the runner through the daemon
// listening on the unix socket path. The connection is full duplex; it is
// delivered to the runner's Accept for the same name.
func Dial(ctx context.Context, socket, name string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("dial sandboxd: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	req, _ := http.NewRequest(http.MethodPost, "http://sandboxd/v1/dial?name="+url.QueryEscape(name), nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", dialUpgrade)
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("dial sandboxd: %w", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("dial sandboxd: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, fmt.Errorf("dial sandboxd: %s", resp.Status)
	}
	if ctx.Err() != nil {
		c.Close()
		return nil, ctx.Err()
	}
	return &bufConn{Conn: c, r: br}, nil
}

// bufConn is a connection whose first bytes may already sit in a reader.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the connection, so the runner reads EOF while
// this side can still read.
func (c *bufConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
