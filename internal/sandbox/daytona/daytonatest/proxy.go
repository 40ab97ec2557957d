package daytonatest

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// proxy serves a signed preview URL: /preview/{token}/… goes to the
// sandbox's daemon port.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	tok := r.PathValue("token")
	s.mu.Lock()
	pv := s.tokens[tok]
	b := s.sandboxes[pv.id]
	if b == nil || b.sb.State != "started" || pv.port != s.opts.DaemonPort {
		s.mu.Unlock()
		http.Error(w, "sandbox not found or not running", http.StatusBadGateway)
		return
	}
	if s.opts.StrictCookies {
		name := "daytona-sandbox-auth-" + b.sb.ID[:8]
		want, issued := s.cookies[tok]
		if !issued {
			want = randomHex(8)
			s.cookies[tok] = want
			http.SetCookie(w, &http.Cookie{Name: name, Value: want, Path: "/"})
		} else if c, err := r.Cookie(name); err != nil || c.Value != want {
			s.mu.Unlock()
			http.Error(w, "missing sandbox auth cookie", http.StatusUnauthorized)
			return
		}
	}
	root := b.root
	s.mu.Unlock()
	addr, err := os.ReadFile(filepath.Join(root, "home", ".runner-sandboxd", "sandboxd.addr"))
	if err != nil {
		http.Error(w, "nothing listens on the port", http.StatusBadGateway)
		return
	}
	target := &url.URL{Scheme: "http", Host: strings.TrimSpace(string(addr))}
	s.mu.Lock()
	ctx, cancel := context.WithCancel(r.Context())
	b.nproxied++
	key := b.nproxied
	b.proxied[key] = cancel
	fw := &freezer{ResponseWriter: w, ctx: r.Context(), frozen: make(chan struct{})}
	b.freezers[key] = fw
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(b.proxied, key)
		delete(b.freezers, key)
		s.mu.Unlock()
		cancel()
	}()
	defer fw.hang()
	// Full duplex, as Daytona's proxy is: otherwise the response's first
	// write closes a request body the transport may still be sending, and
	// the upstream connection is cut mid-response (a checkpoint's export
	// ended "unexpected EOF" now and then under load).
	_ = http.NewResponseController(w).EnableFullDuplex()
	w = fw
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, "/preview/"+tok)
			pr.Out.URL.RawPath = ""
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "bad gateway: "+err.Error(), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
}

// freezer is a preview response that Vanish can make go silent: from then
// on nothing more reaches the client and the connection stays open, as a
// connection to a sandbox that died without a word does, until the
// client gives up.
type freezer struct {
	http.ResponseWriter
	ctx    context.Context
	frozen chan struct{}
}

func (f *freezer) isFrozen() bool {
	select {
	case <-f.frozen:
		return true
	default:
		return false
	}
}

func (f *freezer) Write(p []byte) (int, error) {
	if f.isFrozen() {
		<-f.ctx.Done()
		return 0, f.ctx.Err()
	}
	return f.ResponseWriter.Write(p)
}

func (f *freezer) Flush() {
	if !f.isFrozen() {
		if fl, ok := f.ResponseWriter.(http.Flusher); ok {
			fl.Flush()
		}
	}
}

func (f *freezer) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// hang holds a frozen response open until the client leaves.
func (f *freezer) hang() {
	if f.isFrozen() {
		<-f.ctx.Done()
	}
}
