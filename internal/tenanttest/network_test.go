package tenanttest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// watched is a TCP listener that counts the connections an attack made.
// Every connection but the test's own sentinel is answered with an HTTP
// 200 "reached", so a client that got through says so.
type watched struct {
	ln       net.Listener
	Addr     string // host:port
	Port     string
	mu       sync.Mutex
	n        int
	sentinel chan struct{}
	wg       sync.WaitGroup
}

func watch(t *testing.T, addr string) *watched {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{ln: ln, Addr: ln.Addr().String(), sentinel: make(chan struct{}, 1)}
	_, w.Port, _ = net.SplitHostPort(w.Addr)
	w.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				if line == "SENTINEL\n" {
					w.sentinel <- struct{}{}
					return
				}
				w.mu.Lock()
				w.n++
				w.mu.Unlock()
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreached")
			})
		}
	})
	t.Cleanup(func() { ln.Close(); w.wg.Wait() })
	return w
}

// connections returns how many connections reached w before now: the
// sentinel dialled now is accepted after every earlier one (the accept
// queue is in order), so no wait is guessed.
func (w *watched) connections(t *testing.T) int {
	t.Helper()
	c, err := net.Dial("tcp", w.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "SENTINEL\n")
	select {
	case <-w.sentinel:
	case <-time.After(30 * time.Second):
		t.Fatal("the watched listener did not see the sentinel")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// hostAddr is a non-loopback IPv4 address of this host, or "" when it
// has none.
func hostAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// withHosts runs runner serve in a private mount namespace whose
// /etc/hosts maps the given names, so names the test lists resolve on the
// runner's host to what the test says, as a hostile DNS answer would.
func withHosts(t *testing.T, names map[string]string) []string {
	t.Helper()
	for _, tool := range []string{"unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("a private mount namespace for /etc/hosts needs root")
	}
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n")
	for n, a := range names {
		fmt.Fprintf(&b, "%s %s\n", a, n)
	}
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, hosts}
}

// getVia is a prompt that GETs url from inside the sandbox with the
// fake harness's http directive, through HTTP_PROXY as every HTTP client
// does (names other than localhost go to the proxy).
func getVia(url string, fields map[string]any) map[string]any {
	f := map[string]any{"modelConnection": map[string]any{"provider": "openai", "deployment": "x", "credentialMode": "none",
		"environment": map[string]string{"T_URL": url}}}
	for k, v := range fields {
		f[k] = v
	}
	return fake("http T_URL T_KEY /", f)
}

func allowlist(entries ...string) map[string]any {
	return map[string]any{"network": map[string]any{"mode": "allowlist", "allowlist": entries}}
}

// TestAttackRebindListedName: the request lists names whose DNS answer,
// on the runner's host, is the host's loopback, its own address or the
// metadata endpoint (a hostile or rebinding DNS server). The allowlist
// proxy resolves the name and dials what it gets. Must hold: the check is
// on the address actually dialled, so every such request is refused with
// 403, and the listeners on loopback and the host's address see no
// connection.
func TestAttackRebindListedName(t *testing.T) {
	needBwrap(t)
	loop := watch(t, "127.0.0.1:0")
	names := map[string]string{"loop.attack.test": "127.0.0.1", "meta.attack.test": "169.254.169.254"}
	var host *watched
	if a := hostAddr(); a != "" {
		host = watch(t, net.JoinHostPort(a, "0"))
		names["host.attack.test"] = a
	}
	r := startWrapped(t, withHosts(t, names))
	targets := []string{"http://loop.attack.test:" + loop.Port, "http://meta.attack.test:" + loop.Port}
	if host != nil {
		targets = append(targets, "http://host.attack.test:"+host.Port)
	}
	for i, u := range targets {
		tr := r.stream(t, getVia(u, map[string]any{"sessionId": fmt.Sprintf("rebind-%d", i),
			"sandboxPermission": allowlist("loop.attack.test", "meta.attack.test", "host.attack.test")}))
		if tr.Status != 200 {
			t.Fatalf("%s: status %d %s", u, tr.Status, tr.Raw)
		}
		if out := tr.Text(); !strings.Contains(out, "http 403 blocked by the sandbox network policy") {
			t.Errorf("%s: the agent got %q; want the proxy's 403 for a refused address", u, out)
		}
	}
	if n := loop.connections(t); n != 0 {
		t.Errorf("the host's loopback listener saw %d connections", n)
	}
	if host != nil {
		if n := host.connections(t); n != 0 {
			t.Errorf("the host-address listener saw %d connections", n)
		}
	}
}

// TestAttackAllowlistRefusedRanges: the request's allowlist is 0.0.0.0/0
// and ::/0, and the agent goes for the host's own address both through
// the proxy (an HTTP GET) and directly (a TCP connect through the
// isolated network). Must hold: "everything" is the internet, never the
// host: both fail and the listener sees no connection. An entry wholly
// on a refused range (127.0.0.1/32, the metadata endpoint, localhost:p)
// is refused at admission, naming the operator's setting.
func TestAttackAllowlistRefusedRanges(t *testing.T) {
	needBwrap(t)
	r := start(t)
	if a := hostAddr(); a != "" {
		host := watch(t, net.JoinHostPort(a, "0"))
		tr := r.stream(t, fake("http T_URL T_KEY /\nconnect "+host.Addr, map[string]any{
			"sessionId": "everything", "sandboxPermission": allowlist("0.0.0.0/0", "::/0"),
			"modelConnection": map[string]any{"provider": "openai", "deployment": "x", "credentialMode": "none",
				"environment": map[string]string{"T_URL": "http://" + host.Addr}}}))
		if tr.Status != 200 {
			t.Fatalf("status %d %s", tr.Status, tr.Raw)
		}
		out := tr.Text()
		if !strings.Contains(out, "http 403 ") || !strings.Contains(out, "connect error") {
			t.Errorf("allowlist 0.0.0.0/0 reached the host's address: %q", out)
		}
		if n := host.connections(t); n != 0 {
			t.Errorf("the host-address listener saw %d connections", n)
		}
	} else {
		t.Log("no non-loopback address on this host: the 0.0.0.0/0 case is left out")
	}
	loop := watch(t, "127.0.0.1:0")
	for _, e := range []string{"127.0.0.1/32", "169.254.169.254", "localhost:" + loop.Port, "[::1]:" + loop.Port, "::ffff:127.0.0.1"} {
		tr := r.stream(t, fake("connect "+loop.Addr, map[string]any{"sessionId": "refused", "sandboxPermission": allowlist(e)}))
		if !refused(tr, "sandboxPermission.network.allowlist[0]") {
			t.Errorf("allowlist %q: %q %q; want a refusal naming the entry and AGENTA_RUNNER_LOCAL_NETWORK_ALLOW", e, tr.Result.Error, tr.Text())
		}
	}
	if n := loop.connections(t); n != 0 {
		t.Errorf("the loopback listener saw %d connections", n)
	}
}

// refused reports whether a turn was refused at admission: no agent
// output, and an error naming field and the operator's setting (or, for
// the runner's own listener, saying so).
func refused(tr turn, field string) bool {
	e := tr.Result.Error
	return !tr.Result.OK && tr.Text() == "" && strings.Contains(e, field) &&
		(strings.Contains(e, "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW") || strings.Contains(e, "runner's own listener"))
}

// model is a modelConnection to baseURL with one credential of usage.
func model(baseURL, usage string) map[string]any {
	return map[string]any{"provider": "openai", "deployment": "x",
		"endpoint":    map[string]any{"baseUrl": baseURL},
		"environment": map[string]string{"OPENAI_BASE_URL": baseURL},
		"credentials": []any{map[string]any{"binding": map[string]any{"kind": "environment", "name": "OPENAI_API_KEY"}, "value": "sk-tenant", "usage": usage}}}
}

// TestAttackModelEndpointOnRefusedRange: a request names as its model
// endpoint a service on the host's loopback (a database, the runner's own
// API) or the metadata endpoint, with a local_use key (the harness dials
// it) or an opaque_http key (the key gateway dials it on the host), under
// network "on" and "allowlist". Must hold: admission refuses it, naming
// AGENTA_RUNNER_LOCAL_NETWORK_ALLOW, and nothing connects to it.
func TestAttackModelEndpointOnRefusedRange(t *testing.T) {
	needBwrap(t)
	r := start(t)
	loop := watch(t, "127.0.0.1:0")
	prompt := "connect " + loop.Addr + "\nhttp OPENAI_BASE_URL OPENAI_API_KEY /models"
	for _, base := range []string{"http://" + loop.Addr, "http://localhost:" + loop.Port, "http://169.254.169.254", r.Base, "http://[::ffff:127.0.0.1]:" + loop.Port} {
		for _, usage := range []string{"local_use", "opaque_http"} {
			for _, mode := range []string{"on", "allowlist"} {
				b := base
				if usage == "opaque_http" {
					// Plain http carries an opaque key only to loopback
					// names; https gets past that check to this one.
					b = "https://" + strings.TrimPrefix(base, "http://")
				}
				tr := r.stream(t, fake(prompt, map[string]any{"sessionId": "model-" + usage + "-" + mode,
					"modelConnection": model(b, usage), "sandboxPermission": map[string]any{"network": map[string]any{"mode": mode}}}))
				if !refused(tr, "modelConnection.endpoint.baseUrl") {
					t.Errorf("baseUrl %s (%s, network %s): %q %q; want a refusal naming modelConnection.endpoint.baseUrl and AGENTA_RUNNER_LOCAL_NETWORK_ALLOW", b, usage, mode, tr.Result.Error, tr.Text())
				}
			}
		}
	}
	if n := loop.connections(t); n != 0 {
		t.Errorf("the loopback listener saw %d connections", n)
	}
}

// TestAttackModelEndpointOpensOnlyItsPort: the operator opened a local
// model server (AGENTA_RUNNER_LOCAL_NETWORK_ALLOW=127.0.0.1:<port>); a
// request naming it with a local_use key gets it, on its port, and the
// agent then goes for the next service on the host's loopback. Must hold:
// the endpoint is reached; nothing else of the host's loopback is (the
// endpoint is opened as host:port, never every port).
func TestAttackModelEndpointOpensOnlyItsPort(t *testing.T) {
	needBwrap(t)
	endpoint, other := watch(t, "127.0.0.1:0"), watch(t, "127.0.0.1:0")
	r := start(t, "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW="+endpoint.Addr)
	for _, mode := range []string{"on", "allowlist"} {
		tr := r.stream(t, fake("connect "+endpoint.Addr+"\nconnect "+other.Addr, map[string]any{"sessionId": "port-" + mode,
			"modelConnection": model("http://"+endpoint.Addr, "local_use"), "sandboxPermission": map[string]any{"network": map[string]any{"mode": mode}}}))
		if tr.Status != 200 {
			t.Fatalf("network %s: status %d %s", mode, tr.Status, tr.Raw)
		}
		lines := strings.Split(strings.TrimSpace(tr.Text()), "\n")
		if len(lines) != 2 || lines[0] != "connect ok" || !strings.HasPrefix(lines[1], "connect error") {
			t.Errorf("network %s: %q; want the endpoint only", mode, lines)
		}
	}
	if n := other.connections(t); n != 0 {
		t.Errorf("the other loopback service saw %d connections", n)
	}
	// Through the key gateway the sandbox needs only the gateway: under
	// "allowlist" the endpoint itself is not opened to it.
	tr := r.stream(t, fake("connect "+endpoint.Addr+"\nhttp OPENAI_BASE_URL OPENAI_API_KEY /models", map[string]any{"sessionId": "gateway",
		"modelConnection": model("http://"+endpoint.Addr, "opaque_http"), "sandboxPermission": allowlist("example.invalid")}))
	lines := strings.Split(strings.TrimSpace(tr.Text()), "\n")
	if tr.Status != 200 || len(lines) != 2 || !strings.HasPrefix(lines[0], "connect error") || lines[1] != "http 200 reached" {
		t.Errorf("through the gateway: %d %q; want the endpoint closed to the sandbox and reached by the gateway", tr.Status, lines)
	}
}
