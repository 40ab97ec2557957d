package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// The headers of replica-to-replica calls.
const (
	// HeaderForwarded marks a forwarded request; its value is the
	// forwarding replica's id. A replica never forwards such a request.
	HeaderForwarded = "X-Runner-Forwarded-By"
	// HeaderToken carries the peer token beside the caller's own token.
	HeaderToken = "X-Runner-Peer-Token"
	// HeaderHandoff is set on the answer of a replica that will not
	// serve a forwarded request: HandoffMoved (it does not hold the
	// session) or HandoffDraining (it is stopping; take the session).
	HeaderHandoff = "X-Runner-Handoff"
)

// The values of HeaderHandoff.
const (
	HandoffMoved    = "moved"
	HandoffDraining = "draining"
)

// ErrMoved reports that the replica reached does not hold the session
// (its lease moved since it was read): read the lease again. Nothing was
// written to the caller.
var ErrMoved = errors.New("the session moved to another replica")

// GoneError reports an owner that is gone (it stopped, it is draining,
// it does not answer): the session may be taken over. Nothing was
// written to the caller.
type GoneError struct {
	Owner string
	Why   string
}

func (e *GoneError) Error() string { return "replica " + e.Owner + " is gone: " + e.Why }

// Registry is what peers read of the store's replica registry.
type Registry interface {
	GetReplica(ctx context.Context, id string) (store.Replica, error)
}

// Config configures Peers.
type Config struct {
	// Self is this replica's id, sent in HeaderForwarded.
	Self string
	// Token is the peer token (AGENTA_RUNNER_PEER_TOKEN).
	Token    string
	Network  *Network
	Registry Registry
	// Heartbeat is how often replicas write their rows: a row three of
	// these old is stale.
	Heartbeat time.Duration
	// Wait bounds how long an owner that does not answer (a timeout, not
	// a refusal) is retried before it is declared gone; default three
	// heartbeats.
	Wait time.Duration
	// DialTimeout bounds one connection attempt; default 2 s.
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// Peers forwards requests to the replicas that own their sessions.
type Peers struct {
	cfg Config
	rt  *http.Transport
	// fresh dials a new connection per request: the one resend of a
	// request whose pooled connection the owner had closed.
	fresh *http.Transport
	now   func() time.Time

	// mu guards the following: registry rows read lately, so that a warm
	// turn forwarded costs no store read (a row's URL changes only when
	// its replica restarts; a failed forward reads it again).
	mu   sync.Mutex
	rows map[string]cachedRow
}

type cachedRow struct {
	row store.Replica
	at  time.Time
}

// maxCachedRows bounds the cache: a store full of forged rows must not
// grow it.
const maxCachedRows = 1024

// New returns Peers. Close releases its idle connections.
func New(cfg Config) *Peers {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 3 * cfg.Heartbeat
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.Network == nil {
		cfg.Network = NewNetwork(nil, nil)
	}
	rt := &http.Transport{
		// Never an environment proxy: a peer is dialled directly, at the
		// address the policy checks.
		Proxy:                  nil,
		DialContext:            cfg.Network.Dialer(cfg.DialTimeout),
		TLSHandshakeTimeout:    5 * time.Second,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        60 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		// The owner's body passes through as it was encoded.
		DisableCompression: true,
		// A body is sent once the owner asks for it (send): an owner
		// that does not ask within this is slow, and gets it anyway.
		ExpectContinueTimeout: time.Second,
	}
	fresh := rt.Clone()
	fresh.DisableKeepAlives = true
	return &Peers{cfg: cfg, rt: rt, fresh: fresh, now: time.Now, rows: map[string]cachedRow{}}
}

// Close closes the idle connections to peers.
func (p *Peers) Close() {
	p.rt.CloseIdleConnections()
	p.fresh.CloseIdleConnections()
}

// Token is the peer token a forwarded request must carry.
func (p *Peers) Token() string { return p.cfg.Token }

// Forward sends r (whose body was read into body) to owner and passes its
// answer to w. It returns nil once the owner answered, whatever the
// status: the owner's result is the caller's. A *GoneError or ErrMoved
// means nothing was written: the caller takes the session over, or reads
// its lease again. Any other error, with nothing written, is why the
// request cannot be forwarded (a store failure, an address outside the
// peer networks). Cancelling r's context cancels the owner's request.
func (p *Peers) Forward(w http.ResponseWriter, r *http.Request, body []byte, owner string) error {
	ctx := r.Context()
	deadline := p.now().Add(p.cfg.Wait)
	for attempt := 0; ; attempt++ {
		rep, err := p.row(ctx, owner, attempt > 0)
		if errors.Is(err, errdefs.ErrNotFound) {
			return &GoneError{Owner: owner, Why: "it has no row in the replica registry (it stopped)"}
		}
		if err != nil {
			return fmt.Errorf("read replica %s from the registry: %w", owner, err)
		}
		if rep.AdvertiseURL == "" {
			if p.stale(rep) {
				return &GoneError{Owner: owner, Why: "it advertises no URL and its last heartbeat is stale"}
			}
			return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("session is held by replica %s, which advertises no URL to forward to (set AGENTA_RUNNER_ADVERTISE_URL on it)", owner))
		}
		err = p.send(w, r, body, rep)
		var ue *unreachableError
		if !errors.As(err, &ue) {
			return err
		}
		if ue.refused {
			again, gerr := p.row(ctx, owner, true)
			if errors.Is(gerr, errdefs.ErrNotFound) || gerr == nil && !again.HeartbeatAt.After(rep.HeartbeatAt) {
				return &GoneError{Owner: owner, Why: fmt.Sprintf("connection refused at %s and no heartbeat since", rep.AdvertiseURL)}
			}
		} else if p.stale(rep) {
			return &GoneError{Owner: owner, Why: fmt.Sprintf("it does not answer at %s (%v) and its last heartbeat was at %s", rep.AdvertiseURL, ue.err, rep.HeartbeatAt.UTC().Format(time.RFC3339))}
		}
		left := deadline.Sub(p.now())
		if left <= 0 {
			return &GoneError{Owner: owner, Why: fmt.Sprintf("it did not answer at %s for %s (%v)", rep.AdvertiseURL, p.cfg.Wait, ue.err)}
		}
		p.cfg.Logger.Warn("peer does not answer; retrying", "replica", owner, "url", rep.AdvertiseURL, logkey.Error, ue.err)
		t := time.NewTimer(min(left, 250*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// row is owner's registry row: as read within the last heartbeat unless
// fresh.
func (p *Peers) row(ctx context.Context, owner string, fresh bool) (store.Replica, error) {
	now := p.now()
	if !fresh {
		p.mu.Lock()
		c, ok := p.rows[owner]
		p.mu.Unlock()
		if ok && now.Sub(c.at) < p.cfg.Heartbeat && !now.Before(c.at) {
			return c.row, nil
		}
	}
	row, err := p.cfg.Registry.GetReplica(ctx, owner)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		delete(p.rows, owner)
		return row, err
	}
	if len(p.rows) >= maxCachedRows {
		clear(p.rows)
	}
	p.rows[owner] = cachedRow{row: row, at: now}
	return row, nil
}

// stale reports a row whose replica has missed three heartbeats.
func (p *Peers) stale(rep store.Replica) bool {
	return p.now().Sub(rep.HeartbeatAt) > 3*p.cfg.Heartbeat
}

// unreachableError is a request that reached no peer: nothing was sent
// that the peer can have acted on, and nothing was written to the caller.
type unreachableError struct {
	refused bool // connection refused: nothing listens there
	err     error
}

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// hopHeaders are a connection's own, never passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
	for _, h := range strings.Split(src.Get("Connection"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			dst.Del(h)
		}
	}
}

// send forwards r to rep. See Forward for its errors; an
// *unreachableError is a request rep provably did not get.
func (p *Peers) send(w http.ResponseWriter, r *http.Request, body []byte, rep store.Replica) error {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, rep.AdvertiseURL+r.URL.RequestURI(), nil)
	if err != nil {
		return fmt.Errorf("replica %s advertises %q: %w", rep.ID, rep.AdvertiseURL, err)
	}
	copyHeader(out.Header, r.Header)
	out.Header.Del(HeaderHandoff)
	out.Header.Set(HeaderForwarded, p.cfg.Self)
	out.Header.Set(HeaderToken, p.cfg.Token)
	// The transport sends again, unasked, a request these mark; the
	// caller's must not make a turn replayable.
	out.Header.Del("Idempotency-Key")
	out.Header.Del("X-Idempotency-Key")
	sent := &sentBody{body: body}
	if len(body) > 0 {
		// The owner acts on a request only once it has read its body
		// (docs/architecture.md): one it never asked for was not acted on.
		out.Header.Set("Expect", "100-continue")
		out.Body, out.GetBody = sent.open(), func() (io.ReadCloser, error) { return sent.open(), nil }
		out.ContentLength = int64(len(body))
	} else {
		out.Header.Del("Expect")
		if r.Method == http.MethodDelete {
			// Idempotent: the transport may send it again on a new
			// connection (a nil value marks it so, and is not sent).
			out.Header["Idempotency-Key"] = nil
		}
	}
	resp, err := p.roundTrip(out, sent)
	if err != nil {
		if errors.Is(err, ErrNotPeer) {
			return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("session is held by replica %s, whose advertised URL %s is refused: %w (add its network to %s on every replica)", rep.ID, rep.AdvertiseURL, err, CIDRsEnv))
		}
		if r.Context().Err() != nil {
			return r.Context().Err()
		}
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "dial" {
			return &unreachableError{refused: errors.Is(err, syscall.ECONNREFUSED), err: err}
		}
		if len(body) > 0 && !sent.sent() {
			return &unreachableError{err: err}
		}
		// Connected, then lost once the owner had the request: it may
		// have acted on it, so it is neither sent again nor taken over.
		return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("replica %s (%s), which holds this session, was lost before it answered (%v): the request may have reached it; retry, and if it is gone another replica takes the session over", rep.ID, rep.AdvertiseURL, err))
	}
	defer resp.Body.Close()
	switch resp.Header.Get(HeaderHandoff) {
	case HandoffMoved:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return ErrMoved
	case HandoffDraining:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return &GoneError{Owner: rep.ID, Why: "it is draining for a restart"}
	}
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson")
	copyHeader(w.Header(), resp.Header)
	if stream {
		w.Header().Del("Content-Length") // a lost owner's stream ends with a line of ours
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	lines := &lineState{start: true}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if stream {
				lines.see(buf[:n])
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return nil // the caller is gone; its context cancels the owner's request
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if r.Context().Err() == nil && stream {
				p.cfg.Logger.Warn("peer lost mid-stream", "replica", rep.ID, "url", rep.AdvertiseURL, logkey.Error, rerr)
				p.endStream(w, r, lines, rep, rerr)
				_ = rc.Flush()
			}
			return nil
		}
	}
}

// roundTrip sends out, and once more on a new connection when the pooled
// connection it went out on failed before the owner asked for its body:
// the owner had closed that connection (idle too long, or restarting) and
// never read the request. RoundTrip, not a Client: a peer's redirect is
// never followed.
func (p *Peers) roundTrip(out *http.Request, body *sentBody) (*http.Response, error) {
	var reused atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) { reused.Store(c.Reused) }}
	resp, err := p.rt.RoundTrip(out.WithContext(httptrace.WithClientTrace(out.Context(), trace)))
	if err == nil || !reused.Load() || out.Body == nil || body.sent() || out.Context().Err() != nil {
		return resp, err
	}
	p.cfg.Logger.Debug("peer closed a kept-alive connection before reading the request; sending it on a new one", logkey.Error, err)
	again := out.Clone(out.Context())
	again.Body = body.open()
	return p.fresh.RoundTrip(again)
}

// sentBody is a forwarded request's body, telling whether the transport
// has begun to send it on any attempt.
type sentBody struct {
	body []byte
	read atomic.Bool
}

func (b *sentBody) open() io.ReadCloser { return &sentReader{b: b, r: bytes.NewReader(b.body)} }

func (b *sentBody) sent() bool { return b.read.Load() }

type sentReader struct {
	b *sentBody
	r *bytes.Reader
}

func (s *sentReader) Read(p []byte) (int, error) {
	s.b.read.Store(true)
	return s.r.Read(p)
}

func (s *sentReader) Close() error { return nil }

// endStream ends the stream of an owner lost mid-answer with a line
// naming it: a turn's result (ok false) unless the owner sent one, or an
// error record on an events stream.
func (p *Peers) endStream(w io.Writer, r *http.Request, lines *lineState, rep store.Replica, cause error) {
	if lines.result {
		return
	}
	if !lines.start {
		_, _ = io.WriteString(w, "\n")
	}
	msg := fmt.Sprintf("replica %s (%s), which held this session, was lost mid-answer (%v): the turn's outcome is not known here; read the session's events (GET /v1/sessions/{id}/events) or send the next turn, which another replica takes over", rep.ID, rep.AdvertiseURL, cause)
	var rec wire.Record
	if r.Method == http.MethodGet {
		rec = wire.Record{Kind: "error", Event: &wire.Event{Type: wire.EventError, Message: msg}}
	} else {
		rec = wire.Record{Kind: wire.RecordResult, Result: &wire.Result{Error: msg, Messages: []wire.OutMessage{}, Events: []wire.Event{}}}
	}
	b, _ := json.Marshal(rec)
	_, _ = w.Write(append(b, '\n'))
}

// lineState follows an NDJSON stream's line boundaries, to tell whether
// a result record went by, holding no line in memory.
type lineState struct {
	start  bool   // at the start of a line
	head   []byte // the current line's first bytes, up to len(resultPrefix)
	result bool
}

var resultPrefix = []byte(`{"kind":"result"`)

func (l *lineState) see(b []byte) {
	for len(b) > 0 {
		if l.start {
			l.start, l.head = false, l.head[:0]
		}
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i]
		}
		if need := len(resultPrefix) - len(l.head); need > 0 {
			l.head = append(l.head, seg[:min(need, len(seg))]...)
			if bytes.Equal(l.head, resultPrefix) {
				l.result = true
			}
		}
		if i < 0 {
			return
		}
		l.start, b = true, b[i+1:]
	}
}
