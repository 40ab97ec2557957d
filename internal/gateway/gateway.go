// Package gateway keeps model keys out of sandboxes. A harness is given a
// placeholder key and a base URL on the runner's own loopback; the
// gateway forwards each request to the real endpoint, swapping the
// placeholder for the key in headers and query, so the key exists only in
// the runner. A placeholder is worthless outside its route: it is valid
// only through this gateway, only towards its endpoint, and only while
// its session lives.
package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// Gateway is the runner-side key-injecting proxy.
type Gateway struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger

	// upstream dials endpoints under the egress policy (no environment
	// proxy: the address checked must be the endpoint's).
	upstream http.RoundTripper

	// mu guards routes.
	mu     sync.Mutex
	routes map[string]*route
	done   chan struct{}
}

type route struct {
	target  *url.URL          // scheme://host of the real endpoint
	secrets map[string]string // placeholder -> key
	proxy   *httputil.ReverseProxy
}

// New listens on 127.0.0.1 (an ephemeral port) and serves until Close.
// Every upstream dial follows policy, on the address actually dialled: an
// endpoint that is, or resolves to, the host's loopback, networks or the
// metadata endpoint is refused unless the operator opened it.
func New(logger *slog.Logger, policy *egress.Policy) (*Gateway, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if policy == nil {
		return nil, errors.New("key gateway: no egress policy")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("key gateway: %w", err)
	}
	policy.AddOwn(ln.Addr()) // an endpoint naming the gateway itself loops
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = policy.Dialer(30 * time.Second).DialContext
	g := &Gateway{ln: ln, log: logger, upstream: tr, routes: map[string]*route{}, done: make(chan struct{})}
	// No read or write timeouts: a model's answer streams for minutes.
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(g.done)
		_ = g.srv.Serve(ln)
	}()
	return g, nil
}

// Addr is host:port of the gateway.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Close stops the gateway and waits for it.
func (g *Gateway) Close() error {
	err := g.srv.Close()
	<-g.done
	return err
}

func random(prefix string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Route is a registered endpoint: the base URL and placeholder keys a
// harness is given instead of the real ones.
type Route struct {
	// BaseURL replaces the endpoint's base URL; it keeps the real URL's
	// path, so a harness that appends "/v1" or not behaves the same.
	BaseURL string
	// Placeholders maps each real key to the placeholder given instead.
	Placeholders map[string]string
	release      func()
}

// Release ends the route: its placeholders stop working.
func (r Route) Release() { r.release() }

// Register routes requests to baseURL, replacing placeholders for keys.
func (g *Gateway) Register(baseURL string, keys []string) (Route, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return Route{}, fmt.Errorf("key gateway: endpoint %q is not an http(s) URL", baseURL)
	}
	token := random("", 16)
	rt := &route{target: &url.URL{Scheme: u.Scheme, Host: u.Host}, secrets: map[string]string{}}
	out := Route{Placeholders: map[string]string{}}
	for _, k := range keys {
		if k == "" {
			continue
		}
		if _, ok := out.Placeholders[k]; ok {
			continue
		}
		p := random("runner-key-", 16)
		out.Placeholders[k] = p
		rt.secrets[p] = k
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(rt.target)
			pr.Out.Host = rt.target.Host
			rt.inject(pr.Out)
		},
		Transport:     g.upstream,
		FlushInterval: -1, // server-sent events pass through as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.log.Warn("key gateway: upstream failed", logkey.Error, err, "host", rt.target.Host)
			http.Error(w, "runner key gateway: upstream "+rt.target.Host+": "+err.Error(), http.StatusBadGateway)
		},
	}
	g.mu.Lock()
	g.routes[token] = rt
	g.mu.Unlock()
	out.BaseURL = "http://" + g.Addr() + "/g/" + token + strings.TrimSuffix(u.Path, "/")
	out.release = func() {
		g.mu.Lock()
		delete(g.routes, token)
		g.mu.Unlock()
	}
	return out, nil
}

// inject swaps placeholders for keys wherever a client puts a key: any
// header value, and query values (Gemini's ?key=).
func (rt *route) inject(r *http.Request) {
	swap := func(s string) string {
		for p, k := range rt.secrets {
			if strings.Contains(s, p) {
				s = strings.ReplaceAll(s, p, k)
			}
		}
		return s
	}
	for name, vs := range r.Header {
		for i, v := range vs {
			r.Header[name][i] = swap(v)
		}
	}
	if r.URL.RawQuery != "" {
		q := r.URL.Query()
		for name, vs := range q {
			for i, v := range vs {
				q[name][i] = swap(v)
			}
		}
		r.URL.RawQuery = q.Encode()
	}
}

var errNoRoute = errors.New("unknown or released gateway route")

// ServeHTTP forwards /g/<token>/<path> to the route's endpoint.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/g/")
	if !ok {
		http.Error(w, errNoRoute.Error(), http.StatusNotFound)
		return
	}
	token, path, _ := strings.Cut(rest, "/")
	g.mu.Lock()
	rt := g.routes[token]
	g.mu.Unlock()
	if rt == nil {
		http.Error(w, "runner key gateway: "+errNoRoute.Error(), http.StatusForbidden)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + path
	r2.URL.RawPath = ""
	rt.proxy.ServeHTTP(w, r2)
}
