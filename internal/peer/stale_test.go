package peer

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// standIn is an owner on a raw listener, so that the test decides when a
// connection closes. Its first connection answers one request, then
// either closes once the next request's first bytes arrive, unanswered
// and unread (what a server closing an idle keep-alive connection looks
// like to its client, deterministically), or, with readThenDie, reads
// that request whole first (an owner killed after reading it). With
// gone, it also stops listening then (an owner restarting). Later
// connections answer every request.
type standIn struct {
	ln          net.Listener
	readThenDie bool
	gone        bool
	wg          sync.WaitGroup

	// mu guards the following.
	mu     sync.Mutex
	bodies []string // each request body read whole, in order
	conns  int
}

func newStandIn(t *testing.T, readThenDie, gone bool) *standIn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &standIn{ln: ln, readThenDie: readThenDie, gone: gone}
	s.wg.Go(s.accept)
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

func (s *standIn) URL() string { return "http://" + s.ln.Addr().String() }

func (s *standIn) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		first := s.conns == 1
		s.mu.Unlock()
		s.wg.Go(func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for n := 0; ; n++ {
				if first && n == 1 {
					s.cut(c, br)
					return
				}
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if _, err := s.read(c, req); err != nil {
					return
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
					return
				}
			}
		})
	}
}

// read reads req's body whole, asking for it first when the client waits
// to be asked (Expect: 100-continue), as net/http's server does when its
// handler reads the body.
func (s *standIn) read(c net.Conn, req *http.Request) (string, error) {
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return "", err
		}
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, req.Method+" "+string(b))
	s.mu.Unlock()
	return string(b), nil
}

// cut ends the first connection at its second request, unanswered.
func (s *standIn) cut(c net.Conn, br *bufio.Reader) {
	if _, err := br.Peek(1); err != nil {
		return
	}
	if s.readThenDie {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := s.read(c, req); err != nil {
			return
		}
	}
	if s.gone {
		_ = s.ln.Close()
	}
}

func (s *standIn) seen() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...), s.conns
}

// forwardTo forwards one request through p to replica-b.
func forwardTo(p *Peers, method, path, body string, header http.Header) (*httptest.ResponseRecorder, error) {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	return w, p.Forward(w, r, []byte(body), "replica-b")
}

// primed is a stand-in owner (newStandIn) and Peers that forwarded it a
// first turn, answered: its connection is kept alive for the next one.
func primed(t *testing.T, readThenDie, gone bool, header http.Header) (*standIn, *Peers) {
	t.Helper()
	owner := newStandIn(t, readThenDie, gone)
	p := New(Config{Self: "replica-a", Token: peerToken, Registry: newRegistry(fresh("replica-b", owner.URL()))})
	t.Cleanup(p.Close)
	if w, err := forwardTo(p, "POST", "/run", `{"turn":1}`, header); err != nil || w.Body.String() != "ok" {
		t.Fatalf("first turn: %v %q", err, w.Body)
	}
	return owner, p
}

// TestForwardStaleKeepAlive: the owner closes the kept-alive connection
// just as the next forwarded request goes out on it, unread. Must hold:
// the request is sent again on a new connection and answered, the owner
// reads every turn's body once; an owner that stopped listening then is
// gone (nothing reached it: the session may be taken over).
func TestForwardStaleKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name, method, body string
	}{
		{"turn", "POST", `{"turn":2}`},
		{"kill", "POST", `{"sessionId":"s"}`},
		{"delete", "DELETE", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner, p := primed(t, false, false, nil)
			w, err := forwardTo(p, tc.method, "/run", tc.body, nil)
			if err != nil || w.Code != 200 || w.Body.String() != "ok" {
				t.Fatalf("the request sent on the closed keep-alive connection: %v, %d %q", err, w.Code, w.Body)
			}
			bodies, conns := owner.seen()
			if d := cmp.Diff([]string{`POST {"turn":1}`, tc.method + " " + tc.body}, bodies); d != "" || conns != 2 {
				t.Errorf("the owner read (-want +got):\n%s\nover %d connections, want 2", d, conns)
			}
		})
	}
	t.Run("owner-restarting", func(t *testing.T) {
		_, p := primed(t, false, true, nil)
		w, err := forwardTo(p, "POST", "/run", `{"turn":2}`, nil)
		var g *GoneError
		if !errors.As(err, &g) || w.Body.Len() != 0 {
			t.Fatalf("an owner that closed its idle connections and stopped listening: %v, wrote %q; want it gone", err, w.Body)
		}
	})
}

// TestForwardOwnerReadThenLost: an owner that read the forwarded turn
// whole and was lost before it answered may have run it: the turn is not
// sent again (not there, not on a new connection, not even when the
// caller's request carries an Idempotency-Key), nor is the session taken
// over; the caller is told the replica was lost.
func TestForwardOwnerReadThenLost(t *testing.T) {
	for name, h := range map[string]http.Header{
		"plain":           nil,
		"idempotency-key": {"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k2"}},
	} {
		t.Run(name, func(t *testing.T) {
			owner, p := primed(t, true, false, h)
			w, err := forwardTo(p, "POST", "/run", `{"turn":2}`, h)
			var g *GoneError
			if err == nil || errors.As(err, &g) || !strings.Contains(err.Error(), "was lost before it answered") || w.Body.Len() != 0 {
				t.Fatalf("an owner lost after reading the turn: %v, wrote %q", err, w.Body)
			}
			bodies, conns := owner.seen()
			if d := cmp.Diff([]string{`POST {"turn":1}`, `POST {"turn":2}`}, bodies); d != "" || conns != 1 {
				t.Errorf("the owner read (-want +got):\n%s\nover %d connections, want 1", d, conns)
			}
		})
	}
}
