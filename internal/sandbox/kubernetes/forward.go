package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// forwarder dials a port inside one pod through the API server's
// portforward subresource: one multiplexed connection per pod, one pair of
// streams (data, error) per dialled connection. It is the DialContext of
// the sandboxd client's transport, so the daemon listens on the pod's
// loopback only and nothing else in the cluster can reach it.
type forwarder struct {
	cfg       *rest.Config
	client    kubernetes.Interface
	namespace string
	pod       string
	port      int

	nextID atomic.Int64

	// mu guards conn and failed.
	mu     sync.Mutex
	conn   httpstream.Connection
	failed error // set by fail: no connection is dialled any more
}

// connection returns the live multiplexed connection, dialling a new one
// when there is none or the last one closed (an API server restart, a
// kubelet's idle timeout).
func (f *forwarder) connection() (httpstream.Connection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed != nil {
		return nil, f.failed
	}
	if f.conn != nil {
		select {
		case <-f.conn.CloseChan():
			f.conn = nil
		default:
			return f.conn, nil
		}
	}
	transport, upgrader, err := spdy.RoundTripperFor(f.cfg)
	if err != nil {
		return nil, err
	}
	u := f.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(f.namespace).Name(f.pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	conn, proto, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", f.namespace, f.pod, err)
	}
	if proto != portforward.PortForwardProtocolV1Name {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: the API server speaks %q, want %q", f.namespace, f.pod, proto, portforward.PortForwardProtocolV1Name)
	}
	f.conn = conn
	return conn, nil
}

// DialContext opens a connection to the forwarded port; network and
// address are ignored (the pod and port are fixed).
func (f *forwarder) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := f.connection()
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(f.port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.FormatInt(f.nextID.Add(1), 10))
	errStream, err := conn.CreateStream(h)
	if err != nil {
		f.drop(conn)
		return nil, fmt.Errorf("port-forward to pod %s/%s: error stream: %w", f.namespace, f.pod, err)
	}
	// Nothing is written on the error stream; the kubelet reports there.
	errStream.Close()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.RemoveStreams(errStream)
		f.drop(conn)
		return nil, fmt.Errorf("port-forward to pod %s/%s: data stream: %w", f.namespace, f.pod, err)
	}
	c := &streamConn{conn: conn, data: data, errs: errStream, done: make(chan struct{})}
	go c.watchErrors()
	return c, nil
}

// runtimeHint says why a daemon that never answered its health check
// may be unreachable under a RuntimeClass: a runtime with its own network
// stack (gVisor's default) listens where the container runtime's
// port-forward never dials, and the daemon looks down for good. Not only
// on containerd's "inside namespace" refusal: that text comes on the
// forward's error stream, and an attempt cut short by the deadline often
// ends with a bare EOF instead (seen in a clean-clone CI run).
func (p *Provider) runtimeHint(error) string {
	if p.cfg.RuntimeClassName == "" {
		return ""
	}
	return fmt.Sprintf(" (RuntimeClass %s: a runtime with its own network stack cannot be port-forwarded to; for gVisor set network = \"host\" in its runsc configuration, see docs/kubernetes.md)", p.cfg.RuntimeClassName)
}

// drop forgets conn when it is still the current one, so the next dial
// makes a new connection.
func (f *forwarder) drop(conn httpstream.Connection) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn == conn {
		f.conn = nil
		conn.Close()
	}
}

// fail ends the connection, as Close, and makes every later dial fail
// with err: the pod is gone.
func (f *forwarder) fail(err error) {
	f.mu.Lock()
	f.failed = err
	f.mu.Unlock()
	f.Close()
}

// Close ends the multiplexed connection and with it every stream.
func (f *forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn != nil {
		f.conn.Close()
		f.conn = nil
	}
}

// streamConn is one forwarded connection as a net.Conn.
type streamConn struct {
	conn httpstream.Connection
	data httpstream.Stream
	errs httpstream.Stream

	done chan struct{} // closed when watchErrors returns
	// mu guards remote and closed.
	mu     sync.Mutex
	remote error // what the kubelet reported on the error stream
	closed bool
}

var _ net.Conn = (*streamConn)(nil)

// watchErrors reads the kubelet's error stream (a failed dial inside the
// pod) and ends the data stream when it reports one. Close waits for it.
func (c *streamConn) watchErrors() {
	defer close(c.done)
	msg, err := io.ReadAll(io.LimitReader(c.errs, 4<<10))
	if err == nil && len(msg) > 0 {
		c.mu.Lock()
		c.remote = errors.New(string(msg))
		c.mu.Unlock()
		c.data.Reset()
	}
}

func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.data.Read(b)
	if err != nil {
		c.mu.Lock()
		if c.remote != nil {
			err = fmt.Errorf("port-forward: %w", c.remote)
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) { return c.data.Write(b) }

func (c *streamConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	// An abortive close: the HTTP client is done with the connection, and
	// a reset ends the kubelet's side (and its error stream) at once.
	_ = c.data.Reset()
	_ = c.errs.Reset()
	<-c.done
	c.conn.RemoveStreams(c.data, c.errs)
	return nil
}

type forwardAddr struct{}

func (forwardAddr) Network() string { return "portforward" }
func (forwardAddr) String() string  { return "portforward" }

func (c *streamConn) LocalAddr() net.Addr  { return forwardAddr{} }
func (c *streamConn) RemoteAddr() net.Addr { return forwardAddr{} }

// Deadlines are not supported by the streams; the HTTP client bounds its
// calls with contexts instead.
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
