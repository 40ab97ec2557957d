// Package api is the runner's HTTP surface: the Agenta-compatible routes
// (/health, /subscription-status, /run, /stream, /kill) and our /v1
// additions. It authenticates, decodes and validates, calls the runner,
// and encodes JSON or NDJSON. It is the only place that maps error classes
// to HTTP statuses (errors.go).
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// Config configures the handler.
type Config struct {
	Token string
	// ProjectTokens are per-project tokens, by project: each authenticates
	// only the project-scoped routes (/run, /stream, /kill, /v1/sessions,
	// /v1/jobs)
	// for requests of its project (scope.go).
	ProjectTokens    map[string]string
	Version          string
	ConcurrencyLimit int
	MaxBodyBytes     int64
	// HistoryCacheBytes bounds the histories of recent requests kept
	// decoded, so the next turn of a conversation decodes only what it
	// adds (0: no cache).
	HistoryCacheBytes int
	PingInterval      time.Duration
	KillTimeout       time.Duration
	// ReadTimeout is the longest a request body may stall (conns.go);
	// 0: no deadline.
	ReadTimeout time.Duration
	// Health returns the extra /health fields (harnesses, providers …).
	Health func() map[string]any
	// Ready reports whether the replica takes new turns (nil: always).
	Ready func() error
	// SubscriptionStatus returns the /subscription-status harness map.
	SubscriptionStatus func() map[string]any
	// Jobs serves /v1/jobs (nil: no such routes).
	Jobs jobs.Queue
	// Peers forwards requests for sessions other replicas hold (nil: one
	// replica; such a turn is refused with 409). PeerToken is what a
	// forwarded request must carry (forward.go).
	Peers     Forwarder
	PeerToken string
	Logger    *slog.Logger
}

// Handler serves the runner's routes.
type Handler struct {
	cfg      Config
	runner   *runner.Service
	log      *slog.Logger
	mux      *http.ServeMux
	inflight atomic.Int64
	history  *wire.HistoryCache // nil: none
	holders  holders            // forward.go
}

// Route is an additional authenticated route (the /v1 API of other packages).
type Route struct {
	Pattern string // a net/http ServeMux pattern, e.g. "GET /v1/sessions"
	Handler http.Handler
}

// New returns the handler.
func New(cfg Config, r *runner.Service, extra ...Route) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.ConcurrencyLimit <= 0 {
		cfg.ConcurrencyLimit = 1000
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 15 * time.Second
	}
	if cfg.KillTimeout <= 0 {
		cfg.KillTimeout = 5 * time.Second
	}
	h := &Handler{cfg: cfg, runner: r, log: cfg.Logger, mux: http.NewServeMux()}
	if cfg.HistoryCacheBytes > 0 {
		h.history = wire.NewHistoryCache(cfg.HistoryCacheBytes)
	}
	h.mux.HandleFunc("GET /health", h.health)
	h.mux.HandleFunc("GET /ready", h.ready)
	h.mux.Handle("GET /subscription-status", h.auth(http.HandlerFunc(h.subscription)))
	h.mux.Handle("POST /run", h.authProject(http.HandlerFunc(h.run)))
	h.mux.Handle("POST /stream", h.authProject(http.HandlerFunc(h.run)))
	h.mux.Handle("POST /kill", h.authProject(http.HandlerFunc(h.kill)))
	h.mux.Handle("GET /v1/sessions", h.authProject(http.HandlerFunc(h.listSessions)))
	h.mux.Handle("GET /v1/sessions/{id}", h.authProject(http.HandlerFunc(h.getSession)))
	h.mux.Handle("DELETE /v1/sessions/{id}", h.authProject(http.HandlerFunc(h.deleteSession)))
	h.mux.Handle("GET /v1/sessions/{id}/events", h.authProject(http.HandlerFunc(h.sessionEvents)))
	h.mux.Handle("POST /v1/sessions/{id}/interactions/{iid}", h.authProject(http.HandlerFunc(h.decide)))
	h.jobRoutes()
	for _, rt := range extra {
		h.mux.Handle(rt.Pattern, h.auth(rt.Handler))
	}
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		// A bug must cost one request, not the process and its turns.
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error("handler panic", "panic", v, "path", r.URL.Path)
			WriteError(w, http.StatusInternalServerError, "internal error")
		}
	}()
	withBodyDeadline(w, r, h.cfg.ReadTimeout)
	h.mux.ServeHTTP(&statusRecorder{ResponseWriter: w}, r)
}

// statusRecorder turns ServeMux's own plain-text 404 and 405 into the
// wire's JSON error.
type statusRecorder struct {
	http.ResponseWriter
	swallow bool
}

func (s *statusRecorder) WriteHeader(code int) {
	msg := map[int]string{http.StatusNotFound: "Not found", http.StatusMethodNotAllowed: "Method not allowed"}[code]
	if msg != "" && s.Header().Get("Content-Type") == "text/plain; charset=utf-8" {
		s.swallow = true
		s.Header().Set("Content-Type", "application/json")
		s.Header().Del("X-Content-Type-Options")
		body := `{"ok":false,"error":"` + msg + `"}` + "\n"
		s.Header().Set("Content-Length", strconv.Itoa(len(body)))
		s.ResponseWriter.WriteHeader(code)
		_, _ = io.WriteString(s.ResponseWriter, body)
		return
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.swallow {
		return len(b), nil
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// auth admits the operator's token alone: a route outside every project.
func (h *Handler) auth(next http.Handler) http.Handler {
	return h.authWith(next, false)
}

// authProject admits the operator's token and the project tokens; the
// handler confines a project token's request to its project (scope.go).
func (h *Handler) authProject(next http.Handler) http.Handler {
	return h.authWith(next, true)
}

func (h *Handler) authWith(next http.Handler, projects bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h.checkPeer(r); err != nil {
			WriteErr(w, err)
			return
		}
		c, ok := h.authenticate(r)
		if !ok {
			WriteError(w, http.StatusUnauthorized, "Unauthorized: send the runner token as 'Authorization: Bearer <token>' or 'X-Agenta-Runner-Token: <token>'")
			return
		}
		if c.scoped && !projects {
			WriteErr(w, errdefs.With(errdefs.ErrForbidden, errors.New("a project token is accepted only on /run, /stream, /kill, /v1/sessions and /v1/jobs; this route takes the runner token (AGENTA_RUNNER_TOKEN)")))
			return
		}
		next.ServeHTTP(w, withCaller(r, c))
	})
}

// authenticate tells the operator's token from a project's; every token
// is compared in constant time, and none is ever logged.
func (h *Handler) authenticate(r *http.Request) (caller, bool) {
	got := strings.TrimSpace(r.Header.Get("X-Agenta-Runner-Token"))
	if got == "" {
		a := r.Header.Get("Authorization")
		if len(a) >= 7 && strings.EqualFold(a[:7], "bearer ") {
			got = strings.TrimSpace(a[7:])
		}
	}
	if got == "" {
		return caller{}, false
	}
	if h.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.cfg.Token)) == 1 { // empty: fail closed
		return caller{}, true
	}
	c, found := caller{}, false
	for project, tok := range h.cfg.ProjectTokens {
		if tok != "" && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1 {
			c, found = caller{project: project, scoped: true}, true
		}
	}
	return c, found
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("ready") {
		h.ready(w, r)
		return
	}
	body := map[string]any{
		"status":   "ok",
		"runner":   h.cfg.Version,
		"version":  h.cfg.Version,
		"protocol": 1,
		"engines":  []string{"acp"},
	}
	if h.cfg.Health != nil {
		for k, v := range h.cfg.Health() {
			body[k] = v
		}
	}
	WriteJSON(w, http.StatusOK, body)
}

func (h *Handler) subscription(w http.ResponseWriter, r *http.Request) {
	hs := map[string]any{}
	if h.cfg.SubscriptionStatus != nil {
		hs = h.cfg.SubscriptionStatus()
	}
	WriteJSON(w, http.StatusOK, map[string]any{"version": 1, "harnesses": hs})
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	if err != nil {
		WriteErr(w, bodyError(err))
		return
	}
	var req struct {
		SessionID any `json:"sessionId"`
		ProjectID any `json:"projectId"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		WriteError(w, http.StatusBadRequest, "Invalid JSON: "+err.Error())
		return
	}
	sid, _ := req.SessionID.(string)
	pid, _ := req.ProjectID.(string)
	if strings.TrimSpace(sid) == "" || strings.TrimSpace(pid) == "" {
		WriteError(w, http.StatusBadRequest, "sessionId and projectId are both required: /kill must be scoped to exactly one tenant's session")
		return
	}
	c := callerOf(r)
	if err := c.allow(pid); err != nil {
		WriteErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.KillTimeout)
	defer cancel()
	var n int
	if c.scoped {
		// Only its project's session: not a turn that named no project.
		n = h.runner.KillSession(ctx, store.SessionKey{ProjectID: pid, SessionID: sid})
	} else {
		n = h.runner.Kill(ctx, sid, pid)
	}
	if n == 0 {
		// Nothing here: the session's turn or warm harness may be another
		// replica's (a turn that named no project is leased bare).
		if h.routed(w, r, body, store.SessionKey{ProjectID: pid, SessionID: sid}) {
			return
		}
		if !c.scoped && h.routed(w, r, body, store.SessionKey{SessionID: sid}) {
			return
		}
	}
	h.log.Info("kill", logkey.Session, sid, logkey.Project, pid, "turns", n)
	WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "killed": n})
}

func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errdefs.With(errdefs.ErrTooLarge, errors.New("request body too large (limit "+strconv.FormatInt(mbe.Limit, 10)+" bytes; raise AGENTA_RUNNER_MAX_BODY_BYTES)"))
	}
	return errdefs.Invalidf("read body: %v", err)
}

func (h *Handler) run(w http.ResponseWriter, r *http.Request) {
	if n := h.inflight.Add(1); n > int64(h.cfg.ConcurrencyLimit) {
		h.inflight.Add(-1)
		refuse(w, r, errdefs.With(errdefs.ErrExhausted, errors.New("Runner at capacity ("+strconv.Itoa(h.cfg.ConcurrencyLimit)+" concurrent runs); retry later or raise AGENTA_RUNNER_CONCURRENCY_LIMIT")))
		return
	}
	defer h.inflight.Add(-1)

	body, err := readAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes), r.ContentLength, h.cfg.MaxBodyBytes)
	if err != nil {
		refuse(w, r, bodyError(err))
		return
	}
	req, err := h.history.Decode(body)
	if err != nil {
		refuse(w, r, err)
		return
	}
	if err := callerOf(r).scopeRequest(req); err != nil {
		refuse(w, r, err)
		return
	}
	key := runner.KeyOf(req)
	if h.forwardKnown(w, r, body, key) {
		return
	}
	turn, err := h.runner.Start(r.Context(), req)
	if err == nil {
		h.holders.forget(key) // this replica's now
	} else {
		// Another replica's session: forwarded there, or taken over.
		var served bool
		turn, served, err = h.elsewhere(w, r, body, err, func() (*runner.Turn, error) {
			req, err := h.history.Decode(body)
			if err != nil {
				return nil, err
			}
			if err := callerOf(r).scopeRequest(req); err != nil {
				return nil, err
			}
			return h.runner.Start(r.Context(), req)
		})
		if served {
			return
		}
		if err != nil {
			h.handoffDraining(w, r, err)
			refuse(w, r, err)
			return
		}
	}
	h.runTurn(w, r, turn)
}

// runTurn runs an admitted turn: NDJSON with Accept: application/x-ndjson,
// else one JSON result.
func (h *Handler) runTurn(w http.ResponseWriter, r *http.Request, turn *runner.Turn) {
	if wantsNDJSON(r) {
		h.stream(w, r, turn)
		return
	}
	res, err := turn.Run(r.Context(), nil)
	status := http.StatusOK
	if err != nil {
		status = statusOf(err)
	}
	WriteJSON(w, status, res)
}

// stream writes NDJSON: event records as they happen, a ping record when
// the turn has been silent for PingInterval, then exactly one result.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, turn *runner.Turn) {
	out := openNDJSON(w)
	stopPings := out.ping(h.cfg.PingInterval)
	agenta := turn.Platform()
	turn.Streamed() // the result below carries no events
	res, _ := turn.Run(r.Context(), func(seq int64, ev wire.Event) {
		if agenta && runnerOnly(ev) {
			return
		}
		// done is followed at once by the result, which flushes both.
		out.put(wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &ev}, ev.Type != wire.EventDone)
	})
	stopPings()
	res.Events = []wire.Event{}
	out.write(wire.Record{Kind: wire.RecordResult, Result: &res})
}

type ndjson struct {
	w   io.Writer
	rc  *http.ResponseController
	enc *json.Encoder

	// mu guards the following; the pinger and the turn write concurrently.
	mu   sync.Mutex
	last time.Time
	err  error
}

func (n *ndjson) write(rec wire.Record) { n.put(rec, true) }

// put encodes rec, and sends it unless flush is false: then it waits in
// the buffer for the next record's flush.
func (n *ndjson) put(rec wire.Record, flush bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return // the client is gone; the turn is being cancelled through its context
	}
	n.err = n.enc.Encode(rec)
	if n.err == nil && flush {
		n.err = n.rc.Flush()
	}
	n.last = time.Now()
}

// startNDJSON commits to a 200 NDJSON stream and sends its header.
func startNDJSON(w http.ResponseWriter) *ndjson {
	out := openNDJSON(w)
	out.flush()
	return out
}

// openNDJSON commits to a 200 NDJSON stream whose header leaves with its
// first record: a turn's stream, whose first event (environment_starting)
// the turn emits as it starts, so the header costs no write of its own.
func openNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &ndjson{w: w, rc: http.NewResponseController(w), enc: newEncoder(w), last: time.Now()}
}

// ping writes a ping record whenever the stream has been silent for
// every, so callers with idle timeouts keep a quiet stream open. The
// returned stop waits for the pinger to end.
func (n *ndjson) ping(every time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if n.idleFor() >= every-every/10 {
					n.write(wire.Record{Kind: wire.RecordPing})
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

func newEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

func (n *ndjson) failed() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

func (n *ndjson) flush() {
	n.mu.Lock()
	defer n.mu.Unlock()
	_ = n.rc.Flush()
	n.last = time.Now()
}

func (n *ndjson) idleFor() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Since(n.last)
}

// preallocMax is the most a request body's announced length reserves.
const preallocMax = 4 << 20

// readAll reads r into one buffer of the announced length (a run request
// carries the whole history: io.ReadAll's doubling copied it several
// times). With no length, one over max, or one over preallocMax (a
// length is a claim: the bytes must arrive before they cost that much
// memory), it grows as the bytes come.
func readAll(r io.Reader, length, max int64) ([]byte, error) {
	if length <= 0 || length > max || length > preallocMax {
		return io.ReadAll(r)
	}
	// net/http ends the body at the announced length.
	buf := make([]byte, length)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
