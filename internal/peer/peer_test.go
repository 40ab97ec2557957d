package peer

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.Global()...) }

// registry is an in-memory replica registry.
type registry struct {
	mu   sync.Mutex
	rows map[string]store.Replica
	puts int
}

func newRegistry(rows ...store.Replica) *registry {
	r := &registry{rows: map[string]store.Replica{}}
	for _, row := range rows {
		r.rows[row.ID] = row
	}
	return r
}

func (r *registry) GetReplica(_ context.Context, id string) (store.Replica, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[id]
	if !ok {
		return store.Replica{}, errdefs.With(errdefs.ErrNotFound, errors.New("no replica "+id))
	}
	return row, nil
}

func (r *registry) PutReplica(_ context.Context, row store.Replica) (store.Replica, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows[row.ID] = row
	r.puts++
	return row, nil
}

func (r *registry) DeleteReplica(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.rows, id)
	return nil
}

func (r *registry) get(id string) (store.Replica, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[id]
	return row, ok
}

const peerToken = "peer-token-0123456789abcdef"

// forwarder is this replica's side: a server whose handler forwards every
// request to owner, as the API does for a session another replica holds.
func forwarder(t *testing.T, reg Registry, owner string) (*Peers, *httptest.Server, chan error) {
	t.Helper()
	p := New(Config{Self: "replica-a", Token: peerToken, Registry: reg, Heartbeat: time.Second})
	t.Cleanup(p.Close)
	errs := make(chan error, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := p.Forward(w, r, body, owner)
		if err != nil {
			http.Error(w, err.Error(), 599)
		}
		errs <- err
	}))
	t.Cleanup(srv.Close)
	return p, srv, errs
}

func fresh(id, url string) store.Replica {
	return store.Replica{ID: id, AdvertiseURL: url, HeartbeatAt: time.Now()}
}

// TestForwardPassesTheOwnersAnswer: the owner sees the caller's request
// with the forwarding headers (the peer token replacing any the caller
// sent), and the caller gets the owner's status, headers and body.
func TestForwardPassesTheOwnersAnswer(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(HeaderForwarded) != "replica-a" || r.Header.Get(HeaderToken) != peerToken || r.Header.Get("Authorization") != "Bearer caller" || r.URL.RequestURI() != "/run?x=1" || string(body) != `{"q":1}` {
			t.Errorf("owner got %s %s %v %q", r.Method, r.URL.RequestURI(), r.Header, body)
		}
		w.Header().Set("X-Owner", "b")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"ok":false,"error":"busy"}`)
	}))
	defer owner.Close()
	_, srv, errs := forwarder(t, newRegistry(fresh("replica-b", owner.URL)), "replica-b")
	req, _ := http.NewRequest("POST", srv.URL+"/run?x=1", strings.NewReader(`{"q":1}`))
	req.Header.Set("Authorization", "Bearer caller")
	req.Header.Set(HeaderToken, "forged-by-the-caller")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("X-Owner") != "b" || string(b) != `{"ok":false,"error":"busy"}` {
		t.Errorf("caller got %d %v %q", resp.StatusCode, resp.Header, b)
	}
	if err := <-errs; err != nil {
		t.Error(err)
	}
}

// TestForwardStreamsUnbuffered: every line the owner flushes reaches the
// caller before the owner writes the next one, and the caller's
// disconnect cancels the owner's request.
func TestForwardStreamsUnbuffered(t *testing.T) {
	next := make(chan struct{})
	cancelled := make(chan struct{})
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As the API's handlers do: the body first (it is sent when asked
		// for), then the answer; the server sees the caller leave once
		// the body is read.
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		rc := http.NewResponseController(w)
		for _, line := range []string{`{"kind":"event","seq":1}`, `{"kind":"ping"}`} {
			_, _ = io.WriteString(w, line+"\n")
			_ = rc.Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				close(cancelled)
				return
			}
		}
		<-r.Context().Done()
		close(cancelled)
	}))
	defer owner.Close()
	_, srv, errs := forwarder(t, newRegistry(fresh("replica-b", owner.URL)), "replica-b")
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/stream", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for _, want := range []string{`{"kind":"event","seq":1}`, `{"kind":"ping"}`} {
		// The owner waits for next before writing more: a line held in a
		// buffer anywhere on the way would block here for good.
		line, err := rd.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("line %q %v, want %s", line, err, want)
		}
		next <- struct{}{}
	}
	cancel()
	<-cancelled
	if err := <-errs; err != nil {
		t.Error(err)
	}
}

// TestForwardOwnerLostMidStream: a stream the owner stops mid-turn ends
// with a result that names the lost replica; one that already carried its
// result gets nothing more.
func TestForwardOwnerLostMidStream(t *testing.T) {
	for _, tc := range []struct {
		name, sent string
		extra      bool
	}{
		{"mid-line", `{"kind":"event","seq":1}` + "\n" + `{"kind":"ev`, true},
		{"after-result", `{"kind":"event","seq":1}` + "\n" + `{"kind":"result","result":{"ok":true}}` + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body) // as the API's handlers do, before answering
				w.Header().Set("Content-Type", "application/x-ndjson")
				_, _ = io.WriteString(w, tc.sent)
				_ = http.NewResponseController(w).Flush()
				panic(http.ErrAbortHandler) // the connection is cut: a killed process
			}))
			defer owner.Close()
			_, srv, errs := forwarder(t, newRegistry(fresh("replica-b", owner.URL)), "replica-b")
			resp, err := http.Post(srv.URL+"/stream", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			<-errs
			got := strings.TrimPrefix(string(b), tc.sent)
			if !strings.HasPrefix(string(b), tc.sent) {
				t.Fatalf("the owner's bytes did not pass whole: %q", b)
			}
			if !tc.extra {
				if got != "" {
					t.Errorf("added after the owner's result: %q", got)
				}
				return
			}
			if !strings.HasPrefix(got, "\n{\"kind\":\"result\"") || !strings.Contains(got, "replica replica-b ("+owner.URL+")") || !strings.Contains(got, "was lost") {
				t.Errorf("end of a lost owner's stream: %q", got)
			}
		})
	}
}

// TestForwardHandoff: an owner that does not hold the session says so,
// and one that drains hands it over; nothing of either answer reaches the
// caller.
func TestForwardHandoff(t *testing.T) {
	for _, tc := range []struct {
		handoff string
		want    func(error) bool
	}{
		{HandoffMoved, func(err error) bool { return errors.Is(err, ErrMoved) }},
		{HandoffDraining, func(err error) bool {
			var g *GoneError
			return errors.As(err, &g) && strings.Contains(g.Why, "draining")
		}},
	} {
		owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderHandoff, tc.handoff)
			http.Error(w, "not here", http.StatusServiceUnavailable)
		}))
		p := New(Config{Self: "replica-a", Token: peerToken, Registry: newRegistry(fresh("replica-b", owner.URL))})
		w := httptest.NewRecorder()
		err := p.Forward(w, httptest.NewRequest("POST", "/stream", nil), nil, "replica-b")
		if !tc.want(err) || w.Body.Len() != 0 {
			t.Errorf("%s: %v, wrote %q", tc.handoff, err, w.Body)
		}
		p.Close()
		owner.Close()
	}
}

// TestForwardGone: an owner with no row, or refusing connections with no
// heartbeat since, is gone at once: nothing is written, the caller takes
// the session over.
func TestForwardGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	for why, reg := range map[string]*registry{
		"no row in the replica registry":                            newRegistry(),
		"connection refused at " + dead + " and no heartbeat since": newRegistry(fresh("replica-b", dead)),
	} {
		p := New(Config{Self: "replica-a", Token: peerToken, Registry: reg})
		w := httptest.NewRecorder()
		err := p.Forward(w, httptest.NewRequest("POST", "/stream", nil), nil, "replica-b")
		var g *GoneError
		if !errors.As(err, &g) || g.Owner != "replica-b" || !strings.Contains(g.Why, why) || w.Body.Len() != 0 {
			t.Errorf("want gone for %q: %v, wrote %q", why, err, w.Body)
		}
		p.Close()
	}
}

// TestForwardForgedRowRefusedAtDial: a row naming an address outside the
// peer networks is refused by the dialer's check, naming the setting; it
// is not taken for a dead owner.
func TestForwardForgedRowRefusedAtDial(t *testing.T) {
	reg := newRegistry(fresh("replica-b", "http://192.0.2.10:8765"))
	p := New(Config{Self: "replica-a", Token: peerToken, Registry: reg})
	defer p.Close()
	w := httptest.NewRecorder()
	err := p.Forward(w, httptest.NewRequest("POST", "/stream", nil), nil, "replica-b")
	var g *GoneError
	if !errors.Is(err, ErrNotPeer) || errors.As(err, &g) || !strings.Contains(err.Error(), CIDRsEnv) || w.Body.Len() != 0 {
		t.Fatalf("forged row: %v, wrote %q", err, w.Body)
	}
	// Opened by the operator, the same address is dialled (and, as
	// nothing answers at a documentation address, not reached).
	n := NewNetwork([]netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, nil)
	if err := n.Control("tcp4", "192.0.2.10:8765", nil); err != nil {
		t.Errorf("listed network refused: %v", err)
	}
}

func TestNetwork(t *testing.T) {
	n := NewNetwork([]netip.Prefix{netip.MustParsePrefix("10.42.0.0/16")}, []string{".runner-pods.agenta.svc"})
	n.hostAddrs = func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("172.20.0.5"), netip.MustParseAddr("fd00::5")}, nil
	}
	for _, tc := range []struct {
		network, addr string
		ok            bool
	}{
		{"tcp", "127.0.0.1:8765", true},
		{"tcp6", "[::1]:8765", true},
		{"tcp", "10.42.3.4:8765", true},
		{"tcp", "[::ffff:10.42.3.4]:8765", true},
		{"tcp", "172.20.0.5:8765", true},
		{"tcp", "[fd00::5]:8765", true},
		{"tcp", "172.20.0.6:8765", false}, // the host's subnet is not the host
		{"tcp", "10.43.0.1:8765", false},
		{"tcp", "169.254.169.254:80", false},
		{"udp", "127.0.0.1:53", false},
	} {
		if err := n.Control(tc.network, tc.addr, nil); (err == nil) != tc.ok {
			t.Errorf("Control(%s, %s) = %v, want ok=%v", tc.network, tc.addr, err, tc.ok)
		}
	}
	// A name under a peer domain is dialled where the cluster's DNS says,
	// but never at the metadata endpoint; any other name is checked on
	// its address.
	for host, ok := range map[string]bool{
		"runner-0.runner-pods.agenta.svc": true, "RUNNER-1.runner-pods.agenta.svc.": true,
		"runner-pods.agenta.svc": false, "evilrunner-pods.agenta.svc": false, "runner-0.runner-pods.agenta.svc.evil.com": false,
	} {
		if n.inDomain(host) != ok {
			t.Errorf("inDomain(%s) = %v", host, !ok)
		}
	}
	if err := controlNamed("tcp", "169.254.169.254:80", nil); !errors.Is(err, ErrNotPeer) {
		t.Errorf("a peer domain's name at the metadata endpoint: %v", err)
	}
	if err := controlNamed("tcp", "10.44.1.2:8765", nil); err != nil {
		t.Errorf("a peer domain's name at a pod address: %v", err)
	}
}

// TestForwardWaitsBoundedForASilentOwner: an owner whose dial times out
// is retried while its heartbeat is fresh, for the bounded wait, then
// declared gone; one whose heartbeat is stale is gone at once.
func TestForwardWaitsBoundedForASilentOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := newRegistry(fresh("replica-b", "http://127.0.0.1:1"))
		dials := 0
		silent := func() *Peers {
			p := New(Config{Self: "replica-a", Token: peerToken, Registry: reg, Heartbeat: time.Second})
			p.rt.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials++
				return nil, &net.OpError{Op: "dial", Net: network, Err: errTimeout{}}
			}
			return p
		}
		p := silent()
		start := time.Now()
		err := p.Forward(httptest.NewRecorder(), httptest.NewRequest("POST", "/stream", nil), nil, "replica-b")
		var g *GoneError
		if !errors.As(err, &g) || !strings.Contains(g.Why, "did not answer") {
			t.Fatalf("silent owner: %v", err)
		}
		if waited := time.Since(start); waited < 3*time.Second || waited > 4*time.Second || dials < 2 {
			t.Errorf("waited %s over %d dials, want the 3s bound", waited, dials)
		}

		p.Close()
		reg.rows["replica-b"] = store.Replica{ID: "replica-b", AdvertiseURL: "http://127.0.0.1:1", HeartbeatAt: time.Now().Add(-time.Minute)}
		p = silent() // nothing cached
		start = time.Now()
		err = p.Forward(httptest.NewRecorder(), httptest.NewRequest("POST", "/stream", nil), nil, "replica-b")
		if !errors.As(err, &g) || !strings.Contains(g.Why, "last heartbeat") || time.Since(start) != 0 {
			t.Fatalf("stale owner: %v after %s", err, time.Since(start))
		}
		p.Close()
	})
}

type errTimeout struct{}

func (errTimeout) Error() string { return "i/o timeout" }
func (errTimeout) Timeout() bool { return true }

// TestHeartbeat: the row is written at start, every interval after, and
// at once when draining; Stop ends the beats and removes the row.
func TestHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := newRegistry()
		hb := NewHeartbeat(reg, "replica-a", "http://10.0.0.1:8765", time.Second, nil)
		if err := hb.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		row, ok := reg.get("replica-a")
		if !ok || row.AdvertiseURL != "http://10.0.0.1:8765" || row.Draining || !row.HeartbeatAt.Equal(time.Now()) {
			t.Fatalf("first row %+v", row)
		}
		time.Sleep(3*time.Second + time.Millisecond)
		synctest.Wait()
		if row, _ := reg.get("replica-a"); reg.puts != 4 || time.Since(row.HeartbeatAt) > time.Millisecond {
			t.Errorf("after 3 intervals: %d writes, last at %s", reg.puts, row.HeartbeatAt)
		}
		if err := hb.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if row, _ := reg.get("replica-a"); !row.Draining {
			t.Error("not draining")
		}
		if err := hb.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := reg.get("replica-a"); ok {
			t.Error("row left after Stop")
		}
	})
}
