// Package resign is the loopback S3 endpoint a FUSE mount reaches its
// store through. The FUSE server (rclone) gets keys of its own, random
// per mount and valid only on 127.0.0.1; the endpoint verifies each
// request's SigV4 signature with them, confines it to the mount's bucket
// and prefix, and re-signs it with the store's current lease before it
// forwards it. The lease is the Keeper's, re-signed before 80% of its
// lifetime, so keys that expire mid-turn never reach the FUSE server
// (which could not take new ones while mounted); a request the store
// refuses for its credentials is re-signed once and retried.
package resign

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/workspace"
)

// Region is the region the FUSE server signs for; the store's own region
// is the lease's.
const Region = "us-east-1"

// maxBuffered is the largest request body held in memory so that it can
// be sent again after a refusal; the FUSE server is configured to send
// parts no larger (rclone's upload cutoff and chunk size).
const maxBuffered = 16 << 20

// FailAfter is how long the store may keep failing the endpoint's requests
// (with no success between) before Err reports it.
const FailAfter = 10 * time.Second

// Config is what an endpoint serves.
type Config struct {
	Leases workspace.Leaser
	// Prefix is the mount's key prefix under the lease's own prefix.
	Prefix string
	Log    *slog.Logger
	// FailAfter overrides FailAfter (tests).
	FailAfter time.Duration
}

// Endpoint is one mount's loopback S3 endpoint.
type Endpoint struct {
	ln        net.Listener
	srv       *http.Server
	done      chan struct{}
	log       *slog.Logger
	failAfter time.Duration
	key       string
	secret    string
	bucket    string // of the lease at Serve
	full      string // the mount's full key prefix in bucket

	// mu guards the following.
	mu          sync.Mutex
	leases      workspace.Leaser
	prefix      string
	client      *http.Client
	clientOf    string // the endpoint the client was made for
	where       string // the store's location, for messages
	failingFrom time.Time
	lastErr     error
	fatal       error
}

// Serve starts an endpoint on 127.0.0.1 at a free port. It signs one lease
// now, so that a store that cannot sign fails here, naming it.
func Serve(ctx context.Context, c Config) (*Endpoint, error) {
	l, err := c.Leases.Lease(ctx)
	if err != nil {
		return nil, workspace.StoreError("s3", "sign", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("loopback s3 endpoint: %w", err)
	}
	e := &Endpoint{
		ln: ln, done: make(chan struct{}), log: c.Log, failAfter: c.FailAfter,
		key: "fuse" + random(8), secret: random(24),
		bucket: l.Bucket, full: joinKey(l.Prefix, c.Prefix),
		leases: c.Leases, prefix: c.Prefix, where: l.Location(),
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.failAfter <= 0 {
		e.failAfter = FailAfter
	}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelDebug)}
	go func() {
		defer close(e.done)
		_ = e.srv.Serve(ln)
	}()
	return e, nil
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func joinKey(a, b string) string {
	a, b = strings.Trim(a, "/"), strings.Trim(b, "/")
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// Remote implements workspace.Loopback.
func (e *Endpoint) Remote() workspace.S3Remote {
	return workspace.S3Remote{
		URL: "http://" + e.ln.Addr().String(), Region: Region, AccessKey: e.key, SecretKey: e.secret,
		Path: e.bucket + "/" + e.full,
	}
}

// String names the store behind the endpoint (no secrets).
func (e *Endpoint) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.where
}

// SetLeases implements workspace.Loopback: later requests sign with l,
// which must reach the same key prefix.
func (e *Endpoint) SetLeases(l workspace.Leaser, prefix string) {
	e.mu.Lock()
	e.leases, e.prefix = l, prefix
	e.mu.Unlock()
}

// Err implements workspace.Loopback.
func (e *Endpoint) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fatal != nil {
		return e.fatal
	}
	if !e.failingFrom.IsZero() && time.Since(e.failingFrom) >= e.failAfter {
		return e.lastErr
	}
	return nil
}

// Failing is the store's last failure while it has been failing, even
// for less than FailAfter; nil once a request succeeded since.
func (e *Endpoint) Failing() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fatal != nil {
		return e.fatal
	}
	if e.failingFrom.IsZero() {
		return nil
	}
	return e.lastErr
}

// Close implements workspace.Loopback.
func (e *Endpoint) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.srv.Shutdown(ctx)
	if err != nil {
		err = e.srv.Close()
	}
	<-e.done
	return err
}

func (e *Endpoint) failed(err error) {
	e.mu.Lock()
	if e.failingFrom.IsZero() {
		e.failingFrom = time.Now()
	}
	e.lastErr = workspace.StoreError(e.where, "request through the mount", err)
	e.mu.Unlock()
	e.log.Warn("workspace mount: store request failed", logkey.Error, err)
}

func (e *Endpoint) succeeded() {
	e.mu.Lock()
	e.failingFrom, e.lastErr = time.Time{}, nil
	e.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := e.verify(r); err != nil {
		e.log.Warn("workspace mount: refused a request", "method", r.Method, "path", r.URL.Path, logkey.Error, err)
		s3Error(w, http.StatusForbidden, "AccessDenied", err.Error())
		return
	}
	if err := e.confine(r); err != nil {
		e.log.Warn("workspace mount: refused a request", "method", r.Method, "path", r.URL.Path, logkey.Error, err)
		s3Error(w, http.StatusForbidden, "AccessDenied", err.Error())
		return
	}
	var body []byte
	replay := r.ContentLength >= 0 && r.ContentLength <= maxBuffered
	if replay && r.ContentLength > 0 {
		b, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength+1))
		if err != nil || int64(len(b)) != r.ContentLength {
			s3Error(w, http.StatusBadRequest, "IncompleteBody", fmt.Sprintf("read request body: %d of %d bytes, %v", len(b), r.ContentLength, err))
			return
		}
		body = b
	}
	if !replay {
		// A streamed body: full duplex, or writing the response closes a
		// body the transport may still be reading the end of, and it cuts
		// the store's connection mid-response.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	resp, lease, err := e.forward(r, body, replay)
	if err != nil {
		e.failed(err)
		s3Error(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
		return
	}
	if refusal(resp) {
		msg := drain(resp)
		_, rerr := e.renew(r.Context(), lease)
		if rerr != nil || !replay {
			// Unsigned again or not replayable: the FUSE server retries
			// a 503 on its own, with the new lease.
			cause := fmt.Errorf("the store refused the lease (%s)", msg)
			if rerr != nil {
				cause = errors.Join(cause, rerr)
			}
			e.failed(cause)
			s3Error(w, http.StatusServiceUnavailable, "SlowDown", cause.Error())
			return
		}
		if resp, _, err = e.forward(r, body, true); err != nil {
			e.failed(err)
			s3Error(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
			return
		}
		if refusal(resp) {
			msg := drain(resp)
			e.failed(fmt.Errorf("the store refused a freshly signed lease: %s", msg))
			s3Error(w, http.StatusForbidden, "AccessDenied", "the store refused a freshly signed lease: "+msg)
			return
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 {
		e.failed(fmt.Errorf("%s %s: %s", r.Method, r.URL.Path, resp.Status))
	} else {
		e.succeeded()
	}
	for k, vv := range resp.Header {
		if hopByHop[http.CanonicalHeaderKey(k)] {
			continue
		}
		w.Header()[k] = vv
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (e *Endpoint) renew(ctx context.Context, failed workspace.Lease) (workspace.Lease, error) {
	e.mu.Lock()
	ls := e.leases
	e.mu.Unlock()
	return ls.Renew(ctx, failed)
}

// refusal is an answer a fresh lease may cure.
func refusal(resp *http.Response) bool {
	return resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusBadRequest && strings.Contains(peek(resp), "Token")
}

// peek reads a small error body without consuming it.
func peek(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return string(b)
}

// drain returns the S3 error code and message of resp and closes it.
func drain(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	var x struct {
		Code    string
		Message string
	}
	if xml.Unmarshal(b, &x) == nil && x.Code != "" {
		return strings.TrimSpace(x.Code + " " + x.Message)
	}
	return resp.Status
}

var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// forwarded are the request headers passed on to the store (besides
// x-amz-*, which are all passed but the signature's own).
var forwarded = []string{"Content-Type", "Content-Md5", "Content-Encoding", "Content-Disposition", "Content-Language",
	"Cache-Control", "Expires", "Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"}

var ownAmz = map[string]bool{"X-Amz-Date": true, "X-Amz-Security-Token": true}

// forward sends r to the store, signed with the current lease.
func (e *Endpoint) forward(r *http.Request, body []byte, replay bool) (*http.Response, workspace.Lease, error) {
	ctx := r.Context()
	e.mu.Lock()
	ls, prefix := e.leases, e.prefix
	e.mu.Unlock()
	l, err := ls.Lease(ctx)
	if err != nil {
		return nil, workspace.Lease{}, err
	}
	if l.Bucket != e.bucket || joinKey(l.Prefix, prefix) != e.full {
		err := fmt.Errorf("the store's lease now names %s, not the mounted %s", path.Join(l.Bucket, joinKey(l.Prefix, prefix)), path.Join(e.bucket, e.full))
		e.mu.Lock()
		e.fatal = workspace.StoreError(l.Location(), "mount", err)
		e.mu.Unlock()
		return nil, l, err
	}
	c, err := e.clientFor(l)
	if err != nil {
		return nil, l, err
	}
	host, secure := l.Host()
	scheme := "http"
	if secure {
		scheme = "https"
	}
	u := &url.URL{Scheme: scheme, Host: host, Path: r.URL.Path, RawPath: s3utils.EncodePath(r.URL.Path), RawQuery: r.URL.RawQuery}
	var rd io.Reader = http.NoBody
	switch {
	case replay && len(body) > 0:
		rd = bytes.NewReader(body)
	case !replay:
		rd = r.Body
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), rd)
	if err != nil {
		return nil, l, err
	}
	out.ContentLength = r.ContentLength
	if replay {
		out.ContentLength = int64(len(body))
	}
	for _, h := range forwarded {
		if v := r.Header.Values(h); len(v) > 0 {
			out.Header[h] = v
		}
	}
	for k, vv := range r.Header {
		k = http.CanonicalHeaderKey(k)
		if strings.HasPrefix(k, "X-Amz-") && !ownAmz[k] {
			out.Header[k] = vv
		}
	}
	region := l.Region
	if region == "" {
		region = Region
	}
	out = signer.SignV4(*out, l.AccessKey, l.SecretKey, l.SessionToken, region)
	resp, err := c.Do(out)
	if err != nil {
		return nil, l, err
	}
	return resp, l, nil
}

func (e *Endpoint) clientFor(l workspace.Lease) (*http.Client, error) {
	host, secure := l.Host()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.where = l.Location()
	if e.client != nil && e.clientOf == host {
		return e.client, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true // the FUSE server sees the store's bytes
	tr.MaxIdleConnsPerHost = 16
	if secure {
		pool, err := workspace.RootCAs()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	e.client, e.clientOf = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, host
	return e.client, nil
}

// confine refuses what lies outside the mount's bucket and prefix: object
// paths, list prefixes, copy sources.
func (e *Endpoint) confine(r *http.Request) error {
	p := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ := strings.Cut(p, "/")
	if bucket != e.bucket {
		return fmt.Errorf("bucket %q is not the mount's", bucket)
	}
	inside := func(k string) bool {
		for _, seg := range strings.Split(strings.TrimSuffix(k, "/"), "/") {
			if seg == "" || seg == "." || seg == ".." {
				return false // a server that cleans paths would leave the prefix
			}
		}
		return e.full == "" || k == e.full || strings.HasPrefix(k, e.full+"/")
	}
	if key != "" {
		if !inside(key) {
			return fmt.Errorf("key %q is outside the mount", key)
		}
	} else {
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodGet && len(q) == 1 && q.Has("location"):
		case r.Method == http.MethodGet && (q.Has("list-type") || q.Has("prefix") || q.Has("delimiter")):
			if pre := q.Get("prefix"); e.full != "" && !(strings.HasPrefix(pre, e.full+"/") && inside(pre)) {
				return fmt.Errorf("list prefix %q is outside the mount", pre)
			}
		default:
			return fmt.Errorf("%s %s on the bucket is not allowed through the mount", r.Method, r.URL.RawQuery)
		}
	}
	if src := r.Header.Get("X-Amz-Copy-Source"); src != "" {
		s, err := url.PathUnescape(strings.SplitN(src, "?", 2)[0])
		if err != nil {
			return fmt.Errorf("copy source %q: %v", src, err)
		}
		b, k, _ := strings.Cut(strings.TrimPrefix(s, "/"), "/")
		if b != e.bucket || !inside(k) {
			return fmt.Errorf("copy source %q is outside the mount", src)
		}
	}
	return nil
}

// verify checks r's SigV4 signature against the endpoint's own keys.
func (e *Endpoint) verify(r *http.Request) error {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return errors.New("want an AWS4-HMAC-SHA256 Authorization header")
	}
	var cred, signed, sig string
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			sig = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return errors.New("malformed credential scope")
	}
	if !hmac.Equal([]byte(scope[0]), []byte(e.key)) {
		return errors.New("unknown access key")
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case payload == "":
		return errors.New("no x-amz-content-sha256")
	case strings.HasPrefix(payload, "STREAMING-"):
		return fmt.Errorf("streaming signatures (%s) are not supported by the mount's endpoint; configure the client to sign whole payloads", payload)
	}
	date := r.Header.Get("X-Amz-Date")
	t, err := time.Parse("20060102T150405Z", date)
	if err != nil {
		return fmt.Errorf("x-amz-date %q: %v", date, err)
	}
	if d := time.Since(t); d > 15*time.Minute || d < -15*time.Minute {
		return fmt.Errorf("request signed at %s, more than 15 minutes from now", date)
	}
	if scope[1] != t.Format("20060102") {
		return errors.New("credential scope date is not the request's")
	}
	canon := strings.Join([]string{r.Method, canonicalURI(r), canonicalQuery(r.URL.RawQuery), canonicalHeaders(r, signed), signed, payload}, "\n")
	sum := sha256.Sum256([]byte(canon))
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + strings.Join(scope[1:], "/") + "\n" + hex.EncodeToString(sum[:])
	k := mac([]byte("AWS4"+e.secret), scope[1])
	for _, s := range scope[2:] {
		k = mac(k, s)
	}
	want := hex.EncodeToString(mac(k, toSign))
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return errors.New("signature does not match")
	}
	return nil
}

func mac(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// canonicalURI is the path as the client sent it: S3 signs it without
// encoding it again.
func canonicalURI(r *http.Request) string {
	p, _, _ := strings.Cut(r.RequestURI, "?")
	if p == "" {
		return "/"
	}
	return p
}

func canonicalQuery(raw string) string {
	q, _ := url.ParseQuery(raw)
	return strings.ReplaceAll(q.Encode(), "+", "%20")
}

func canonicalHeaders(r *http.Request, signed string) string {
	var b strings.Builder
	names := strings.Split(signed, ";")
	sort.Strings(names)
	for _, n := range names {
		var v string
		switch n {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		default:
			// Trimmed into a copy: the request's own values are forwarded.
			vals := slices.Clone(r.Header.Values(n))
			for i := range vals {
				vals[i] = strings.Join(strings.Fields(vals[i]), " ")
			}
			v = strings.Join(vals, ",")
		}
		b.WriteString(n + ":" + v + "\n")
	}
	return b.String()
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName xml.Name `xml:"Error"`
		Code    string
		Message string
	}{Code: code, Message: msg})
}
