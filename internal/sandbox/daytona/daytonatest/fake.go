// Package daytonatest is a fake Daytona: the REST API and the sandbox
// toolbox on one httptest server, faithful to what the runner relies on
// (docs/protocols.md, Daytona): the sandbox state machine with asynchronous
// transitions (a transition completes after a number of GETs, not after
// time, so tests are deterministic), Daytona's error body
// {path,timestamp,statusCode,error,message}, labels, network settings,
// file upload, process exec that really runs the command in a temp
// directory per sandbox, signed preview URLs that reverse-proxy to
// whatever listens in the sandbox, normally a real `runner sandboxd`, and
// snapshots (POST and GET /snapshots, unique names, build states; the
// Dockerfile is recorded, not built).
// Every call is recorded for tests to count; latency can be injected.
//
// Sandboxes share the host's network and files: a sandbox's "filesystem"
// is its temp dir (toolbox file operations cannot leave it, symlinks
// included), and its processes get HOME there and
// RUNNER_SANDBOXD_LISTEN=127.0.0.1:0, so each daemon picks a free port;
// the preview URL of the daemon port points at the address the daemon
// records in its state dir. Processes do not share the host's pids: every
// start of a sandbox is a fresh pid namespace (see boot), ended by stop,
// delete or Close. That needs unshare(1) and nsenter(1) (util-linux) and
// root or unprivileged user namespaces; New skips the test without them.
package daytonatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configures the fake.
type Options struct {
	APIKey string // default "test-key"
	// TransitionPolls is how many GETs of a sandbox an asynchronous
	// transition (creating→started, stopping→stopped …) takes, and of a
	// snapshot its build (pending→active, building in between); default
	// 1, so the first GET after the request sees the new state.
	TransitionPolls int
	// Latency is added to every API and toolbox call (not to the preview
	// proxy), to model the distance to Daytona in benchmarks.
	Latency time.Duration
	// StrictCookies makes the preview proxy set a daytona-sandbox-auth-*
	// cookie on the first answer and refuse later requests without it,
	// as the real proxy does.
	StrictCookies bool
	// DaemonPort is the sandbox port whose preview URL reaches the
	// process listening on RUNNER_SANDBOXD_LISTEN; default 2468. Preview
	// URLs of other ports answer 502, as for a port nothing listens on.
	DaemonPort int
	// ListLimit caps the page size of GET /api/sandbox below the caller's
	// limit, to exercise the cursor; 0 keeps Daytona's (limit, default 100).
	ListLimit int
}

// Call is one recorded request.
type Call struct {
	Method string
	Route  string // the route pattern without method, e.g. "/api/sandbox/{id}/start"
	Path   string
}

func (c Call) String() string { return c.Method + " " + c.Route }

// SandboxState is what a test can see of a fake sandbox.
type SandboxState struct {
	ID               string
	State            string
	Labels           map[string]string
	NetworkBlockAll  bool
	NetworkAllowList string
	DomainAllowList  string
	Root             string // the sandbox's directory on the host
}

// Server is the fake. It is safe for concurrent use.
type Server struct {
	URL  string
	opts Options
	hs   *httptest.Server
	root string

	ctx    context.Context // ends with Close; bounds background commands
	cancel context.CancelFunc
	wg     sync.WaitGroup // owns background commands

	// mu guards the following.
	mu        sync.Mutex
	sandboxes map[string]*box
	tokens    map[string]preview // preview token → what it reaches
	cookies   map[string]string  // preview token → cookie value issued
	calls     []Call
	failures  map[string][]int    // route → statuses to answer next
	lost      map[string][]int    // route → statuses to answer after acting
	snapshots map[string]*snapBox // by id
	snapFail  map[string]string   // snapshot name → build error to end with
}

// preview is what a signed preview URL reaches.
type preview struct {
	id   string
	port int
}

// box is one fake sandbox; guarded by Server.mu.
type box struct {
	sb       sandboxJSON
	next     string // state an async transition leads to
	polls    int
	root     string
	sessions map[string]map[string]*command
	proxied  map[int]context.CancelFunc // live preview requests
	freezers map[int]*freezer           // the same requests, for Vanish
	nproxied int
	boot     *boot // the running boot; nil before the first process
	taken    []int // pids in use when the last boot ended
}

type command struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exitCode,omitempty"`
	stdout   string
	stderr   string
}

type sandboxJSON struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	NetworkAllowList    *string           `json:"networkAllowList,omitempty"`
	DomainAllowList     *string           `json:"domainAllowList,omitempty"`
	Target              string            `json:"target"`
	CPU                 int               `json:"cpu"`
	GPU                 int               `json:"gpu"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	Snapshot            string            `json:"snapshot,omitempty"`
	State               string            `json:"state"`
	DesiredState        string            `json:"desiredState,omitempty"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
	CreatedAt           string            `json:"createdAt"`
}

// New starts a fake; it is closed, and its sandboxes' processes stopped,
// when the test ends.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if err := probeNamespaces(); err != nil {
		tb.Skipf("daytonatest needs pid namespaces (unshare, nsenter; root or user namespaces): %v", err)
	}
	if opts.APIKey == "" {
		opts.APIKey = "test-key"
	}
	if opts.TransitionPolls <= 0 {
		opts.TransitionPolls = 1
	}
	if opts.DaemonPort == 0 {
		opts.DaemonPort = 2468
	}
	s := &Server{
		opts:      opts,
		root:      tb.TempDir(),
		sandboxes: make(map[string]*box),
		tokens:    make(map[string]preview),
		cookies:   make(map[string]string),
		failures:  make(map[string][]int),
		lost:      make(map[string][]int),
		snapshots: make(map[string]*snapBox),
		snapFail:  make(map[string]string),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	api := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		mux.Handle(pattern, s.record(true, http.HandlerFunc(h)))
	}
	api("POST /api/sandbox", s.create)
	api("GET /api/sandbox", s.list)
	api("GET /api/sandbox/{id}", s.get)
	api("DELETE /api/sandbox/{id}", s.remove)
	api("POST /api/sandbox/{id}/start", s.start)
	api("POST /api/sandbox/{id}/stop", s.stop)
	api("POST /api/sandbox/{id}/archive", s.archive)
	api("POST /api/sandbox/{id}/network-settings", s.network)
	api("PUT /api/sandbox/{id}/labels", s.labels)
	api("POST /api/sandbox/{id}/autostop/{n}", s.interval)
	api("POST /api/sandbox/{id}/autodelete/{n}", s.interval)
	api("GET /api/sandbox/{id}/ports/{port}/signed-preview-url", s.preview)
	api("POST /api/snapshots", s.createSnapshot)
	api("GET /api/snapshots/{id}", s.getSnapshot)
	api("GET /toolbox/{id}/user-home-dir", s.homeDir)
	api("GET /toolbox/{id}/work-dir", s.homeDir)
	api("GET /toolbox/{id}/files/info", s.fileInfo)
	api("GET /toolbox/{id}/files/download", s.download)
	api("POST /toolbox/{id}/files/upload", s.upload)
	api("POST /toolbox/{id}/files/folder", s.folder)
	api("POST /toolbox/{id}/process/session", s.session)
	api("POST /toolbox/{id}/process/session/{sid}/exec", s.exec)
	api("GET /toolbox/{id}/process/session/{sid}/command/{cid}", s.commandStatus)
	api("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs", s.commandLogs)
	api("POST /toolbox/{id}/process/execute", s.execute)
	mux.Handle("/preview/{token}/", s.record(false, http.HandlerFunc(s.proxy)))
	s.hs = httptest.NewServer(mux)
	s.URL = s.hs.URL
	tb.Cleanup(s.Close)
	return s
}

// APIURL is the base URL of the API, for daytona.Config.APIURL.
func (s *Server) APIURL() string { return s.URL + "/api" }

// APIKey is the key the fake accepts.
func (s *Server) APIKey() string { return s.opts.APIKey }

// Close stops every sandbox's processes and the server.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	var boxes []*box
	for _, b := range s.sandboxes {
		boxes = append(boxes, b)
		for _, c := range b.proxied {
			c()
		}
	}
	s.mu.Unlock()
	for _, b := range boxes {
		s.halt(b)
	}
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// Calls returns every request so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Count returns how many recorded calls match "METHOD /route", e.g.
// "POST /api/sandbox/{id}/start".
func (s *Server) Count(route string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.String() == route {
			n++
		}
	}
	return n
}

// ResetCalls forgets the recorded calls.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// Sandbox returns what the fake holds for id.
func (s *Server) Sandbox(id string) (SandboxState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.sandboxes[id]
	if !ok {
		return SandboxState{}, false
	}
	st := SandboxState{
		ID: id, State: b.sb.State, Labels: maps(b.sb.Labels), NetworkBlockAll: b.sb.NetworkBlockAll, Root: b.root,
	}
	if b.sb.NetworkAllowList != nil {
		st.NetworkAllowList = *b.sb.NetworkAllowList
	}
	if b.sb.DomainAllowList != nil {
		st.DomainAllowList = *b.sb.DomainAllowList
	}
	return st, true
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// FailNext makes the next len(statuses) calls of route ("POST
// /api/sandbox" …) answer with those statuses, in order, before acting.
func (s *Server) FailNext(route string, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[route] = append(s.failures[route], statuses...)
}

// LoseNext makes the next len(statuses) calls of route act as usual but
// answer with those statuses, as when a gateway loses the answer.
func (s *Server) LoseNext(route string, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost[route] = append(s.lost[route], statuses...)
}

// Remove deletes sandbox id out of band, as autodelete does.
func (s *Server) Remove(id string) {
	s.mu.Lock()
	b := s.sandboxes[id]
	delete(s.sandboxes, id)
	if b != nil {
		for k, c := range b.proxied {
			c()
			delete(b.proxied, k)
		}
	}
	s.mu.Unlock()
	if b != nil {
		s.halt(b)
	}
}

// Vanish deletes sandbox id out of band without a word on the wire: its
// live preview connections go silent and stay open (no close, no error),
// as when a sandbox dies behind a proxy; only keep-alives can tell.
func (s *Server) Vanish(id string) {
	s.mu.Lock()
	b := s.sandboxes[id]
	delete(s.sandboxes, id)
	if b != nil {
		for k, f := range b.freezers {
			close(f.frozen)
			delete(b.freezers, k)
		}
	}
	s.mu.Unlock()
	if b != nil {
		s.halt(b)
	}
}

// Fail puts sandbox id into the error state with reason.
func (s *Server) Fail(id, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.sandboxes[id]; b != nil {
		b.sb.State, b.sb.ErrorReason, b.next = "error", reason, ""
	}
}

// DropConnections breaks every live preview-proxy request of sandbox id,
// as a proxy restart does.
func (s *Server) DropConnections(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.sandboxes[id]
	if b == nil {
		return 0
	}
	n := len(b.proxied)
	for k, c := range b.proxied {
		c()
		delete(b.proxied, k)
	}
	return n
}

// record logs the call, checks the API key and applies the latency.
func (s *Server) record(auth bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Pattern
		if i := strings.IndexByte(route, ' '); i >= 0 {
			route = route[i+1:]
		}
		call := Call{Method: r.Method, Route: route, Path: r.URL.Path}
		s.mu.Lock()
		s.calls = append(s.calls, call)
		fail, lose := 0, 0
		if q := s.failures[call.String()]; len(q) > 0 {
			fail, s.failures[call.String()] = q[0], q[1:]
		} else if q := s.lost[call.String()]; len(q) > 0 {
			lose, s.lost[call.String()] = q[0], q[1:]
		}
		s.mu.Unlock()
		if fail != 0 {
			apiError(w, r, fail, "injected failure")
			return
		}
		if !auth {
			h.ServeHTTP(w, r)
			return
		}
		if s.opts.Latency > 0 {
			t := time.NewTimer(s.opts.Latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
			apiError(w, r, http.StatusUnauthorized, "Invalid credentials")
			return
		}
		if lose != 0 {
			h.ServeHTTP(&discard{header: http.Header{}}, r)
			apiError(w, r, lose, "injected failure after acting")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// discard is a ResponseWriter that forgets the answer.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// apiError writes Daytona's error body.
func apiError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, map[string]any{
		"path": r.URL.Path, "timestamp": time.Now().UTC().Format(time.RFC3339),
		"statusCode": status, "error": http.StatusText(status), "message": msg,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
