package sandboxd

import (
	"bufio"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/logkey"
)

// The HTTP API. Every route needs the token, as "Authorization: Bearer" or
// "X-Sandboxd-Token" (the second survives proxies that claim Authorization).
// Every answer carries the VersionHeader, which tells a client that the
// daemon answered rather than a proxy in front of it.
//
//	GET    /v1/health                        → Health
//	POST   /v1/processes                     StartRequest → 201 StartResponse
//	GET    /v1/channels/accept?name=&claim=  NDJSON heartbeats, then {"id":…}
//	POST   /v1/entries/{id}/input?offset=N[&close=1]  raw body → {"offset":M}
//	GET    /v1/entries/{id}/events?after=S   NDJSON Event lines until the exit event
//	POST   /v1/entries/{id}/ack?seq=S        → 204; output up to S may be dropped
//	POST   /v1/entries/{id}/kill             → 204; idempotent
//	GET    /v1/entries/{id}/wait?timeout=D   → WaitResponse (Exited false on timeout)
//	DELETE /v1/entries/{id}                  → 204; kill and forget
//	GET    /v1/files?root=R&path=P           → raw bytes
//	PUT    /v1/files?root=R&path=P&mode=0644 raw body → 204; parents created
//
// A file's path P is relative to R, an absolute directory, and is reached
// beneath it without following any link: a link at P is replaced by a
// write and refused by a read, one among P's parents is refused.
//
// Errors are {"error":"…"} with 400, 401, 404, 409 or 410. No route has a
// server-side timeout: a prompt may hold a stream open for hours, and the
// event stream sends a heartbeat line every Heartbeat so proxies that
// close idle connections keep it open.

// DefaultHeartbeat is how often the daemon writes a keep-alive line on
// an idle stream.
const DefaultHeartbeat = time.Second

// VersionHeader is set on every answer of the daemon.
const VersionHeader = "Sandboxd-Version"

// Health is the answer to GET /v1/health.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Home    string `json:"home"`
	Workdir string `json:"workdir"`
	Socket  string `json:"socket,omitempty"`
}

// WaitResponse is the answer to GET /v1/entries/{id}/wait.
type WaitResponse struct {
	Exited     bool        `json:"exited"`
	Exit       *ExitStatus `json:"exit,omitempty"`
	StderrTail string      `json:"stderrTail,omitempty"`
}

// Config configures a Server.
type Config struct {
	Token   string // required
	Version string // reported by health; the runner compares it with its own
	Workdir string // default directory of processes; default the daemon's cwd
	Home    string // reported by health; default $HOME of the daemon
	// Socket is the unix socket path in-sandbox processes Dial; empty
	// disables channels.
	Socket string
	// Heartbeat is the interval of keep-alive lines on idle streams;
	// default DefaultHeartbeat.
	Heartbeat time.Duration
	// MaxBuffer bounds the unacknowledged output of one entry; default 8 MiB.
	MaxBuffer int
	Logger    *slog.Logger
}

// Server is the daemon's state: its entries and the goroutines relaying them.
type Server struct {
	cfg Config
	log *slog.Logger
	wg  sync.WaitGroup // owns every relay goroutine

	// mu guards the following.
	mu       sync.Mutex
	entries  map[string]*entry
	accepts  map[string]chan *entry // channel name → dialed, not yet accepted
	claims   map[string]string      // accept claim → entry id
	closed   bool
	sequence int

	trees treeWatches // tree_watch.go
}

// NewServer returns a daemon serving cfg.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Token == "" {
		return nil, errdefs.Invalidf("sandboxd: token is required")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.MaxBuffer <= 0 {
		cfg.MaxBuffer = 8 << 20
	}
	if cfg.Workdir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("sandboxd: workdir: %w", err)
		}
		cfg.Workdir = wd
	}
	if cfg.Home == "" {
		cfg.Home, _ = os.UserHomeDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		entries: make(map[string]*entry),
		accepts: make(map[string]chan *entry),
		claims:  make(map[string]string),
	}, nil
}

// Handler is the authenticated HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("POST /v1/processes", s.start)
	mux.HandleFunc("GET /v1/channels/accept", s.accept)
	mux.HandleFunc("POST /v1/entries/{id}/input", s.input)
	mux.HandleFunc("GET /v1/entries/{id}/events", s.events)
	mux.HandleFunc("POST /v1/entries/{id}/ack", s.ack)
	mux.HandleFunc("POST /v1/entries/{id}/kill", s.kill)
	mux.HandleFunc("GET /v1/entries/{id}/wait", s.wait)
	mux.HandleFunc("DELETE /v1/entries/{id}", s.remove)
	mux.HandleFunc("GET /v1/files", s.readFile)
	mux.HandleFunc("PUT /v1/files", s.writeFile)
	s.treeRoutes(mux) // tree.go: bulk transfer for durable workspaces
	version := s.cfg.Version
	if version == "" {
		version = "unknown" // never empty: its presence marks the daemon's answers
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(VersionHeader, version)
		if !s.authorized(r) {
			writeError(w, errdefs.With(errdefs.ErrUnauthorized, errors.New("missing or wrong token")))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// DialHandler serves the unix socket: POST /v1/dial?name=N with an
// Upgrade hands the connection to the runner (see channel.go). It needs
// no token; the socket's file mode (0600) restricts it to the sandbox user.
func (s *Server) DialHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/dial", s.dial)
	return mux
}

// Close kills every entry and returns after their goroutines ended.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	es := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		es = append(es, e)
	}
	for _, q := range s.accepts {
		for len(q) > 0 {
			es = append(es, <-q)
		}
	}
	s.mu.Unlock()
	for _, e := range es {
		e.stop()
	}
	s.trees.close()
	s.wg.Wait()
	return nil
}

func (s *Server) authorized(r *http.Request) bool {
	tok := r.Header.Get("X-Sandboxd-Token")
	if tok == "" {
		tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Health{
		Status: "ok", Version: s.cfg.Version, PID: os.Getpid(),
		Home: s.cfg.Home, Workdir: s.cfg.Workdir, Socket: s.cfg.Socket,
	})
}

// newID returns an entry id; called with mu held.
func (s *Server) newID(prefix string) string {
	s.sequence++
	return prefix + strconv.Itoa(s.sequence)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, errdefs.Invalidf("decode start request: %v", err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		writeError(w, errdefs.With(errdefs.ErrUnavailable, errors.New("daemon is shutting down")))
		return
	}
	id := req.ID
	if id != "" {
		if e, ok := s.entries[id]; ok {
			writeJSON(w, http.StatusCreated, StartResponse{ID: e.id})
			return
		}
	} else {
		id = s.newID("p")
	}
	e, pid, err := startProcess(id, req, s.cfg.Workdir, s.cfg.MaxBuffer, &s.wg)
	if err != nil {
		writeError(w, err)
		return
	}
	s.entries[id] = e
	s.log.Info("process started", logkey.PID, pid, "entry", id, "argv0", req.Argv[0])
	writeJSON(w, http.StatusCreated, StartResponse{ID: id, PID: pid})
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *entry {
	s.mu.Lock()
	e := s.entries[r.PathValue("id")]
	s.mu.Unlock()
	if e == nil {
		writeError(w, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("no entry %q", r.PathValue("id"))))
	}
	return e
}

func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	e := s.lookup(w, r)
	if e == nil {
		return
	}
	off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil || off < 0 {
		writeError(w, errdefs.Invalidf("offset: want a non-negative integer"))
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		writeError(w, fmt.Errorf("read body: %w", err))
		return
	}
	n, err := e.write(off, data, r.URL.Query().Get("close") == "1")
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"offset": n})
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	e := s.lookup(w, r)
	if e == nil {
		return
	}
	after := r.URL.Query().Get("after")
	if after == "" {
		after = r.Header.Get("Last-Event-ID")
	}
	var seq int64
	if after != "" {
		var err error
		if seq, err = strconv.ParseInt(after, 10, 64); err != nil || seq < 0 {
			writeError(w, errdefs.Invalidf("after: want a non-negative integer"))
			return
		}
	}
	if _, _, _, err := e.out.read(seq); err != nil {
		writeError(w, err)
		return
	}
	// A reader resuming after seq has everything up to it.
	e.out.ack(seq)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	for {
		evs, changed, done, err := e.out.read(seq)
		if err != nil {
			return // acknowledged under our feet: the client moved on
		}
		for _, ev := range evs {
			if err := enc.Encode(ev); err != nil {
				return
			}
			seq = ev.Seq
		}
		if len(evs) > 0 {
			if err := rc.Flush(); err != nil {
				return
			}
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-heartbeat.C:
			if beat(enc, rc) != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) {
	e := s.lookup(w, r)
	if e == nil {
		return
	}
	seq, err := strconv.ParseInt(r.URL.Query().Get("seq"), 10, 64)
	if err != nil {
		writeError(w, errdefs.Invalidf("seq: want an integer"))
		return
	}
	e.out.ack(seq)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	e := s.lookup(w, r)
	if e == nil {
		return
	}
	e.stop()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	e := s.entries[r.PathValue("id")]
	delete(s.entries, r.PathValue("id"))
	s.mu.Unlock()
	if e != nil {
		e.stop()
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	e := s.lookup(w, r)
	if e == nil {
		return
	}
	// The wait is bounded by the client's choice, so that a long wait
	// becomes a series of short requests that no proxy idles out.
	d, err := time.ParseDuration(r.URL.Query().Get("timeout"))
	if err != nil || d <= 0 {
		d = 30 * time.Second
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.done:
		st := e.exit
		writeJSON(w, http.StatusOK, WaitResponse{Exited: true, Exit: &st, StderrTail: e.stderrTail()})
	case <-t.C:
		writeJSON(w, http.StatusOK, WaitResponse{StderrTail: e.stderrTail()})
	case <-r.Context().Done():
	}
}

// beat writes a heartbeat line on a long-lived NDJSON answer and flushes
// it; an error means the reader is gone.
func beat(enc *json.Encoder, rc *http.ResponseController) error {
	if err := enc.Encode(Event{Heartbeat: true}); err != nil {
		return err
	}
	return rc.Flush()
}

func (s *Server) accept(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	claim := r.URL.Query().Get("claim")
	if name == "" {
		writeError(w, errdefs.Invalidf("name is required"))
		return
	}
	s.mu.Lock()
	if id, ok := s.claims[claim]; ok && claim != "" {
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"id": id})
		return
	}
	q := s.queue(name)
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	_ = rc.Flush()
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case e := <-q:
			s.mu.Lock()
			s.entries[e.id] = e
			if claim != "" {
				s.claims[claim] = e.id
			}
			s.mu.Unlock()
			_ = enc.Encode(map[string]string{"id": e.id})
			_ = rc.Flush()
			return
		case <-heartbeat.C:
			if beat(enc, rc) != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// queue returns the accept queue of name; called with mu held.
func (s *Server) queue(name string) chan *entry {
	q, ok := s.accepts[name]
	if !ok {
		q = make(chan *entry, 64)
		s.accepts[name] = q
	}
	return q
}

func (s *Server) dial(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" || !strings.EqualFold(r.Header.Get("Upgrade"), dialUpgrade) {
		http.Error(w, "want ?name= and Upgrade: "+dialUpgrade, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "daemon is shutting down", http.StatusServiceUnavailable)
		return
	}
	q := s.queue(name)
	id := s.newID("c")
	s.mu.Unlock()
	if len(q) == cap(q) {
		http.Error(w, "too many connections waiting for the runner", http.StatusServiceUnavailable)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + dialUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		c.Close()
		return
	}
	e := newChannel(id, c, bufio.NewReader(brw), s.cfg.MaxBuffer, &s.wg)
	select {
	case q <- e:
		s.log.Info("channel dialed", "entry", id, "name", name)
	default:
		e.stop()
	}
}

// fileParams are a file route's root (absolute) and path beneath it.
func fileParams(q url.Values) (root, rel string, err error) {
	root, rel = q.Get("root"), q.Get("path")
	if err := absRoot(root); err != nil {
		return "", "", err
	}
	if rel, err = filetree.Clean(rel); err != nil {
		return "", "", errdefs.With(errdefs.ErrInvalid, err)
	}
	return root, rel, nil
}

// readFile and writeFile reach the file beneath its root without following
// a link the agent planted (tree.Open, tree.WriteFile): the daemon may run
// with more rights than the agent's processes.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	root, rel, err := fileParams(r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	f, err := filetree.Open(root, rel)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = errdefs.With(errdefs.ErrNotFound, err)
		}
		writeError(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, f)
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	root, rel, err := fileParams(q)
	if err != nil {
		writeError(w, err)
		return
	}
	mode := uint64(0o644)
	if m := q.Get("mode"); m != "" {
		var err error
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil || mode > 0o7777 {
			writeError(w, errdefs.Invalidf("mode %q: want octal permission bits", m))
			return
		}
	}
	if err := filetree.WriteFile(root, rel, r.Body, uint32(mode), 0o755, nil); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, errdefs.ErrUnauthorized):
		status = http.StatusUnauthorized
	case errors.Is(err, errdefs.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, errdefs.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, errdefs.ErrConflict):
		status = http.StatusConflict
	case errors.Is(err, errdefs.ErrUnavailable):
		status = http.StatusServiceUnavailable
	case errors.Is(err, errGone):
		status = http.StatusGone
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// NewID returns a random id: the ids a client picks (a start's, so that
// a retried start is not run twice; an accept's claim) and the daemon's
// watch ids, which a caller must not guess.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
