// Package gateway keeps model keys out of sandboxes. A harness is given a
// placeholder key and a base URL on the runner's own loopback; the
// gateway forwards each request to the real endpoint, swapping the
// placeholder for the key, so the key exists only in the runner. A
// placeholder is worthless outside its route: it is valid only through
// this gateway, only towards its endpoint, and only while its session
// lives.
//
// A key goes only where its provider's protocol carries it (a Placement:
// x-api-key, "Authorization: Bearer", Gemini's ?key=, …): a placeholder
// anywhere else in a request (another header or query parameter, the
// path, the body) is refused, not forwarded, since an upstream may echo
// that field back. Responses are scrubbed as they stream, each key
// replaced by its placeholder, and every substitution is logged (the
// credential's variable and the placement, never the key).
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

	// mu guards routes and reserved.
	mu     sync.Mutex
	routes map[string]*route
	// reserved are the tokens of reservations not yet bound or released.
	reserved map[string]bool
	done     chan struct{}
}

type route struct {
	target  *url.URL // scheme://host of the real endpoint
	secrets []*secret
	longest int // of the placeholders
	scrub   *scrubber
	models  *scrubber // Spec.Models in request bodies; nil without
	paths   *strings.Replacer
	drop    map[string]string // Spec.Drop, canonical names
	log     *slog.Logger      // audit records and refusals
	proxy   *httputil.ReverseProxy
}

// exchange is one request's state shared with the proxy's callbacks.
type exchange struct {
	refused atomic.Pointer[misplaced] // set by the body guard
}

type exchangeKey struct{}

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
	g := &Gateway{ln: ln, log: logger, upstream: tr, routes: map[string]*route{}, reserved: map[string]bool{}, done: make(chan struct{})}
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

// Spec is an endpoint to register.
type Spec struct {
	BaseURL     string
	Credentials []Credential
	// Models renames models in requests, placeholder to real: a harness
	// started before its tenant (a reservation's) was configured with a
	// placeholder model, which each request's body (as a JSON string) and
	// path (Gemini's /models/<model>:…) carry to the tenant's endpoint
	// as the tenant's model.
	Models map[string]string
	// Drop removes these headers (canonical name to exact value) from
	// requests: what a harness sends beside its key that means nothing
	// upstream (claude-agent-acp's gateway mode adds a fixed bearer
	// token to the x-api-key it is given).
	Drop map[string]string
	// Log receives the route's audit records (one per substitution) and
	// refusals; give it the session's attributes. Nil logs to the
	// gateway's logger.
	Log *slog.Logger
}

// Register routes requests to spec.BaseURL, replacing placeholders for
// keys where each is bound.
func (g *Gateway) Register(spec Spec) (Route, error) {
	rt, out, err := g.route(spec, func(string) string { return random("runner-key-", 16) })
	if err != nil {
		return Route{}, err
	}
	token := random("", 16)
	g.mu.Lock()
	g.routes[token] = rt
	g.mu.Unlock()
	out.BaseURL = "http://" + g.Addr() + "/g/" + token + rt.target.Path
	rt.target.Path = ""
	out.release = g.releaser(token)
	return out, nil
}

func (g *Gateway) releaser(token string) func() {
	return func() {
		g.mu.Lock()
		delete(g.routes, token)
		delete(g.reserved, token)
		g.mu.Unlock()
	}
}

// Reservation is a route handed out before its endpoint and key are
// known: a base URL and a placeholder for a harness started ahead of its
// tenant (a pre-warmed slot). Until Bind, every request through it is
// refused, as through a released route: the placeholder reaches nothing.
type Reservation struct {
	BaseURL     string // http://<gateway>/g/<token>: the bound route's, less the endpoint's path
	Placeholder string
	g           *Gateway
	token       string
}

// Reserve holds a route for a later Bind.
func (g *Gateway) Reserve() Reservation {
	r := Reservation{Placeholder: random("runner-key-", 16), g: g, token: random("", 16)}
	r.BaseURL = "http://" + g.Addr() + "/g/" + r.token
	g.mu.Lock()
	g.reserved[r.token] = true
	g.mu.Unlock()
	return r
}

// Bind routes the reservation to spec's endpoint, its key swapped in for
// the reserved placeholder, as Register would: the returned Route's
// BaseURL is the reserved one with the endpoint's path. spec carries one
// key (a reservation has one placeholder). A reservation binds once: a
// second Bind, or one after Release, fails.
func (r Reservation) Bind(spec Spec) (Route, error) {
	var key string
	for _, c := range spec.Credentials {
		if c.Key != "" && key != "" && c.Key != key {
			return Route{}, errors.New("key gateway: a reserved route carries one key; this endpoint has several")
		}
		if c.Key != "" {
			key = c.Key
		}
	}
	rt, out, err := r.g.route(spec, func(string) string { return r.Placeholder })
	if err != nil {
		return Route{}, err
	}
	path := rt.target.Path
	rt.target.Path = ""
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if !r.g.reserved[r.token] {
		return Route{}, errors.New("key gateway: the reservation is bound already or released")
	}
	delete(r.g.reserved, r.token)
	r.g.routes[r.token] = rt
	out.BaseURL = r.BaseURL + path
	out.release = r.g.releaser(r.token)
	return out, nil
}

// Unbound is the Route Bind(spec) would return, without binding anything:
// what a harness started before its tenant is configured with. Its
// Release releases the reservation.
func (r Reservation) Unbound(spec Spec) Route {
	out := Route{BaseURL: r.BaseURL, Placeholders: map[string]string{}, release: r.Release}
	if u, err := url.Parse(spec.BaseURL); err == nil {
		out.BaseURL += strings.TrimSuffix(u.Path, "/")
	}
	for _, c := range spec.Credentials {
		if c.Key != "" {
			out.Placeholders[c.Key] = r.Placeholder
		}
	}
	return out
}

// Release ends the reservation, bound or not: its placeholder stops
// working. Idempotent.
func (r Reservation) Release() { r.g.releaser(r.token)() }

// route builds the route of spec, each key's placeholder made by
// placeholder; rt.target.Path holds the endpoint's path, for the caller
// to place.
func (g *Gateway) route(spec Spec, placeholder func(key string) string) (*route, Route, error) {
	u, err := url.Parse(spec.BaseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, Route{}, fmt.Errorf("key gateway: endpoint %q is not an http(s) URL", spec.BaseURL)
	}
	rt := &route{target: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/")}, log: spec.Log}
	if rt.log == nil {
		rt.log = g.log
	}
	out := Route{Placeholders: map[string]string{}}
	for _, c := range spec.Credentials {
		if c.Key == "" {
			continue
		}
		if len(c.Allow) == 0 {
			return nil, Route{}, fmt.Errorf("key gateway: credential %s has no placement to substitute it in", c.Name)
		}
		if p, ok := out.Placeholders[c.Key]; ok {
			// One key bound to two variables: one placeholder, either's placements.
			s := rt.secrets[slices.IndexFunc(rt.secrets, func(s *secret) bool { return s.placeholder == p })]
			s.name += ", " + c.Name
			s.allow = append(s.allow, c.Allow...)
			continue
		}
		s := &secret{name: c.Name, key: c.Key, placeholder: placeholder(c.Key)}
		for _, p := range c.Allow {
			p.Header = textproto.CanonicalMIMEHeaderKey(p.Header)
			s.allow = append(s.allow, p)
		}
		out.Placeholders[c.Key] = s.placeholder
		rt.secrets = append(rt.secrets, s)
		rt.longest = max(rt.longest, len(s.placeholder))
	}
	rt.scrub = newScrubber(rt.secrets)
	for h, v := range spec.Drop {
		if rt.drop == nil {
			rt.drop = map[string]string{}
		}
		rt.drop[textproto.CanonicalMIMEHeaderKey(h)] = v
	}
	if len(spec.Models) > 0 {
		rt.models, rt.paths = modelRenamer(spec.Models)
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(rt.target)
			pr.Out.Host = rt.target.Host
			// The transport then asks for gzip and decodes it, so the
			// response reaches the scrubber as plain bytes.
			pr.Out.Header.Del("Accept-Encoding")
			pr.Out.Trailer = nil // request trailers would skip the checks
		},
		Transport:      g.upstream,
		ModifyResponse: rt.scrubResponse,
		FlushInterval:  -1, // server-sent events pass through as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if ex, _ := r.Context().Value(exchangeKey{}).(*exchange); ex != nil {
				if m := ex.refused.Load(); m != nil {
					rt.refuse(w, m)
					return
				}
			}
			var enc *encodedError
			if errors.As(err, &enc) {
				rt.log.Warn("key gateway: refused an encoded response", logkey.Error, err, logkey.Host, rt.target.Host)
				http.Error(w, "runner key gateway: "+err.Error(), http.StatusBadGateway)
				return
			}
			// The error may quote the outgoing URL, with a query key in it.
			msg := rt.scrub.string(err.Error())
			g.log.Warn("key gateway: upstream failed", logkey.Error, msg, logkey.Host, rt.target.Host)
			http.Error(w, "runner key gateway: upstream "+rt.target.Host+": "+msg, http.StatusBadGateway)
		},
	}
	return rt, out, nil
}

// encodedError is a response body in an encoding the scrubber cannot read.
type encodedError struct{ encoding string }

func (e *encodedError) Error() string {
	return fmt.Sprintf("upstream answered with Content-Encoding %q, which the gateway cannot scrub for keys, so it is not passed on; the gateway asks for gzip (which it decodes) or identity", e.encoding)
}

// scrubResponse replaces keys in the response's headers and, as it
// streams, its body and trailers.
func (rt *route) scrubResponse(resp *http.Response) error {
	for _, ce := range resp.Header.Values("Content-Encoding") {
		if ce != "" && !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			return &encodedError{ce}
		}
	}
	rt.scrub.header(resp.Header)
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = rt.scrub.body(resp)
		// A scrubbed body may change length.
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
	return nil
}

// refuse answers a request that carries a misplaced placeholder.
func (rt *route) refuse(w http.ResponseWriter, m *misplaced) {
	rt.log.Warn("key gateway: refused a misplaced placeholder", logkey.Credential, m.s.name, logkey.Placement, m.where)
	http.Error(w, "runner key gateway: "+m.Error(), http.StatusBadRequest)
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
	if r.Header.Get("Upgrade") != "" {
		// An upgraded stream (a websocket) is framed and may be
		// compressed: the gateway could not scrub it.
		http.Error(w, "runner key gateway: protocol upgrades (Upgrade: "+r.Header.Get("Upgrade")+") are not passed: the gateway scrubs keys only from plain HTTP responses; use the provider's HTTP API", http.StatusBadRequest)
		return
	}
	ex := &exchange{}
	r2 := r.Clone(context.WithValue(r.Context(), exchangeKey{}, ex))
	for h, v := range rt.drop {
		if vs := r2.Header.Values(h); len(vs) == 1 && vs[0] == v {
			r2.Header.Del(h)
		}
	}
	r2.URL.Path = "/" + path
	r2.URL.RawPath = ""
	subs, m := rt.substitute(r2)
	if m != nil {
		rt.refuse(w, m)
		return
	}
	if r2.Body != nil && r2.Body != http.NoBody {
		r2.Body = &bodyGuard{r: r2.Body, rt: rt, ex: ex}
		if rt.models != nil {
			r2.Body = rt.models.reader(r2.Body)
			r2.ContentLength = -1 // a renamed model may change it
			r2.Header.Del("Content-Length")
		}
	}
	if rt.paths != nil {
		r2.URL.Path = rt.paths.Replace(r2.URL.Path)
	}
	for _, s := range subs {
		rt.log.Info("key gateway: credential substituted", logkey.Credential, s.s.name, logkey.Placement, s.where.String(), logkey.Host, rt.target.Host)
	}
	// Full duplex: by default the response's first write would drain and
	// close the request body, and the transport, maybe still sending the
	// body's end upstream, would then fail and cut the upstream
	// connection mid-response (a stream broken off now and then, under
	// load).
	_ = http.NewResponseController(w).EnableFullDuplex()
	rt.proxy.ServeHTTP(w, r2)
}
