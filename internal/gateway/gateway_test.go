package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

func policy(t *testing.T, allow ...string) *egress.Policy {
	t.Helper()
	p, err := egress.New(allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKeysAreInjectedAndNeverLeaveTheRunner(t *testing.T) {
	var seen *http.Request
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Clone(r.Context())
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	// The test's model server is on loopback: the operator opens it.
	g, err := gateway.New(nil, policy(t, up.Listener.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	rt, err := g.Register(up.URL+"/v1", []string{"sk-real", "goog-real"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(rt.BaseURL, "/v1") || strings.Contains(rt.BaseURL, up.URL) {
		t.Fatalf("base URL %q", rt.BaseURL)
	}
	ph := rt.Placeholders["sk-real"]
	req, _ := http.NewRequest("POST", rt.BaseURL+"/chat/completions?key="+rt.Placeholders["goog-real"], strings.NewReader(`{"x":1}`))
	req.Header.Set("Authorization", "Bearer "+ph)
	req.Header.Set("X-Api-Key", ph)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	if events != 3 {
		t.Fatalf("%d SSE events through the gateway", events)
	}
	if seen.URL.Path != "/v1/chat/completions" || seen.Header.Get("Authorization") != "Bearer sk-real" || seen.Header.Get("X-Api-Key") != "sk-real" || seen.URL.Query().Get("key") != "goog-real" {
		t.Fatalf("upstream saw %s %v %v", seen.URL, seen.Header, seen.URL.Query())
	}
	body, _ := io.ReadAll(seen.Body)
	_ = body

	rt.Release()
	resp2, err := http.Get(rt.BaseURL + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusForbidden {
		t.Fatalf("released route: %d", resp2.StatusCode)
	}
}

func TestRefusesNonHTTPEndpoints(t *testing.T) {
	g, err := gateway.New(nil, policy(t))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Register("ftp://x", []string{"k"}); err == nil {
		t.Fatal("ftp endpoint accepted")
	}
}

// The upstream dial follows the egress policy on the address dialled: an
// endpoint on the host's loopback the operator did not open (a database,
// the runner itself, the gateway) is never connected to.
func TestUpstreamOnRefusedAddressIsNeverDialled(t *testing.T) {
	hit := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- struct{}{} }))
	defer up.Close()
	g, err := gateway.New(nil, policy(t))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	for _, base := range []string{up.URL, "http://localhost:" + port, "http://" + g.Addr()} {
		rt, err := g.Register(base+"/v1", []string{"sk-real"})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(rt.BaseURL + "/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), egress.AllowEnv) && !strings.Contains(string(b), "runner's own") {
			t.Errorf("%s: %d %s; want 502 naming %s", base, resp.StatusCode, b, egress.AllowEnv)
		}
		rt.Release()
	}
	select {
	case <-hit:
		t.Fatal("the loopback upstream was reached")
	default:
	}
}

func TestNewNeedsAPolicy(t *testing.T) {
	if g, err := gateway.New(nil, nil); err == nil {
		g.Close()
		t.Fatal("a gateway without an egress policy")
	}
}
