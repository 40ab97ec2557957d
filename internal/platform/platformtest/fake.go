// Package platformtest is a fake Agenta platform API for tests: it
// records every call the runner makes and answers like the real routers
// (api/oss/src/apis/fastapi/sessions), with switches for an outage, a
// Stop pressed on a session and expiring credentials. Client is a test
// client that calls the runner as Agenta's Python client does.
package platformtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Call is one request the fake received.
type Call struct {
	Method, Path, Query string
	Authorization       string
	Body                json.RawMessage
	// Status is what the fake answered.
	Status int
}

// Record is an ingested session record, as the platform stores it.
type Record struct {
	SessionID    string          `json:"session_id"`
	RecordID     string          `json:"record_id,omitempty"`
	RecordIndex  int             `json:"record_index"`
	Timestamp    time.Time       `json:"timestamp"`
	RecordSource string          `json:"record_source"`
	RecordType   string          `json:"record_type"`
	Attributes   json.RawMessage `json:"attributes"`
	TurnID       string          `json:"turn_id,omitempty"`
	SpanID       string          `json:"span_id,omitempty"`
}

// Interaction is a row of the interactions plane.
type Interaction struct {
	ID         string          `json:"id"`
	SessionID  string          `json:"session_id"`
	TurnID     string          `json:"turn_id"`
	Token      string          `json:"token"`
	Kind       string          `json:"kind"`
	Status     string          `json:"status"`
	Data       json.RawMessage `json:"data"`
	Flags      json.RawMessage `json:"flags,omitempty"`
	Resolution json.RawMessage `json:"resolution,omitempty"`
}

// Attachment is an uploaded file the fake serves.
type Attachment struct {
	Filename, MediaType string
	Data                []byte
}

// Fake is the fake platform.
type Fake struct {
	URL       string
	ProjectID string
	srv       *httptest.Server

	// mu guards the following.
	mu           sync.Mutex
	calls        []Call
	records      []Record
	interactions []*Interaction
	turns        map[string]json.RawMessage // session:index -> body
	completed    map[string]json.RawMessage
	streams      map[string]string // session -> stream id
	current      map[string]string // session -> the turn holding its alive lock
	stopped      map[string]bool   // session -> Stop pressed
	owners       map[string]owner  // session -> the replica owning its affinity key
	held         map[string]chan struct{}
	attachments  map[string]Attachment
	valid        map[string]time.Time // credential -> expiry
	down         bool
	spans        []Span
	changed      chan struct{}
	seq          int
}

// OwnerTTL is how long a replica's claim on a session's owner key
// lasts after its last beat (the API's OWNER_TTL_SECONDS).
const OwnerTTL = 120 * time.Second

type owner struct {
	replica string
	until   time.Time
}

// New starts a fake accepting the credential cred.
func New(t testing.TB, cred string) *Fake {
	f := start(cred)
	t.Cleanup(f.srv.Close)
	return f
}

func start(cred string) *Fake {
	f := &Fake{
		ProjectID: "019a0000-0000-7000-8000-00000000p001",
		turns:     map[string]json.RawMessage{}, completed: map[string]json.RawMessage{}, streams: map[string]string{},
		current: map[string]string{}, stopped: map[string]bool{}, owners: map[string]owner{}, held: map[string]chan struct{}{}, attachments: map[string]Attachment{},
		valid: map[string]time.Time{cred: time.Now().Add(time.Hour)}, changed: make(chan struct{}),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	return f
}

// SetDown makes every call fail with 503 (true) or be served (false).
func (f *Fake) SetDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// Expire makes cred unacceptable: calls with it answer 401.
func (f *Fake) Expire(cred string) {
	f.mu.Lock()
	delete(f.valid, cred)
	f.mu.Unlock()
}

// Stop presses Stop on a session: its running turn's next heartbeat
// learns it is no longer the current turn.
func (f *Fake) Stop(session string) {
	f.mu.Lock()
	f.stopped[session] = true
	f.mu.Unlock()
}

// Owner is the replica owning a session's affinity key, "" when none
// holds it.
func (f *Fake) Owner(session string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.owners[session]; time.Now().Before(o.until) {
		return o.replica
	}
	return ""
}

// AddAttachment stores an upload.
func (f *Fake) AddAttachment(id string, a Attachment) {
	f.mu.Lock()
	f.attachments[id] = a
	f.mu.Unlock()
}

// Calls returns the calls received so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// CallsTo returns the calls to path (without its query).
func (f *Fake) CallsTo(path string) []Call {
	var out []Call
	for _, c := range f.Calls() {
		if c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// Records returns a session's records as the web app reads them: by
// turn, then record index (retries upserted by record id).
func (f *Fake) Records(session string) []Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Record
	for _, r := range f.records {
		if r.SessionID == session {
			out = append(out, r)
		}
	}
	return out
}

// Interactions returns a session's interaction rows.
func (f *Fake) Interactions(session string) []Interaction {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Interaction
	for _, i := range f.interactions {
		if i.SessionID == session {
			out = append(out, *i)
		}
	}
	return out
}

// Completed returns the turns/complete bodies of a session, by index.
func (f *Fake) Completed(session string) []json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.completed {
		if strings.HasPrefix(k, session+":") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []json.RawMessage
	for _, k := range keys {
		out = append(out, f.completed[k])
	}
	return out
}

// Wait blocks until cond holds (checked after every call the fake
// answers), or fails the test at waitBound: the platform's calls come
// from a background queue, whose pace under load no fixed short wait
// can bound.
func (f *Fake) Wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitBound(t))
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("platform: timed out waiting for %s", what)
		}
	}
}

// waitBound is how long Wait waits: until shortly before the test's
// deadline (go test -timeout), at most maxWait, so a wait that can never
// succeed still fails with its message rather than the test binary's
// panic.
func waitBound(t testing.TB) time.Duration {
	const maxWait, margin = 2 * time.Minute, 5 * time.Second
	d := maxWait
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := dt.Deadline(); ok {
			d = min(d, time.Until(end)-margin)
		}
	}
	return max(d, time.Second)
}

// WaitFor is Wait for a channel: it fails the test at the same bound.
func WaitFor[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	deadline := time.NewTimer(waitBound(t))
	defer deadline.Stop()
	select {
	case v := <-ch:
		return v
	case <-deadline.C:
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Hold makes calls to path wait unanswered (a platform too slow to
// answer) until release is called; the test's cleanup releases them.
func (f *Fake) Hold(t testing.TB, path string) (release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.held, path)
			f.mu.Unlock()
			close(ch)
		})
	}
	f.mu.Lock()
	f.held[path] = ch
	f.mu.Unlock()
	t.Cleanup(release)
	return release
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	hold := f.held[r.URL.Path]
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	status, reply, header := f.answer(r, body)
	f.mu.Lock()
	f.calls = append(f.calls, Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Authorization: r.Header.Get("Authorization"), Body: body, Status: status})
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	for k, v := range header {
		w.Header().Set(k, v)
	}
	if b, ok := reply.([]byte); ok {
		w.WriteHeader(status)
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(reply)
}

func detail(msg string) map[string]any { return map[string]any{"detail": msg} }

// answer is the routers' behaviour; it runs under no lock and takes f.mu
// itself.
func (f *Fake) answer(r *http.Request, body []byte) (int, any, map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return http.StatusServiceUnavailable, detail("service unavailable"), nil
	}
	auth := r.Header.Get("Authorization")
	if r.Method == "POST" && r.URL.Path == "/otlp/v1/traces" {
		if _, ok := f.valid[auth]; !ok {
			return http.StatusUnauthorized, detail("Unauthorized"), nil
		}
		return f.otlp(r, body)
	}
	if exp, ok := f.valid[auth]; !ok || time.Now().After(exp) {
		return http.StatusUnauthorized, detail("Unauthorized"), nil
	}
	var in map[string]json.RawMessage
	_ = json.Unmarshal(body, &in)
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(in[k], &s)
		return s
	}
	f.seq++
	id := fmt.Sprintf("019a0000-0000-7000-8000-%012d", f.seq)
	switch p := r.URL.Path; {
	case r.Method == "GET" && p == "/access/permissions/check":
		if r.URL.Query().Get("action") != "run_service" || r.URL.Query().Get("resource_type") != "service" {
			return http.StatusBadRequest, detail("bad permission check"), nil
		}
		fresh := "Secret refreshed-" + id
		f.valid[fresh] = time.Now().Add(time.Hour)
		return 200, map[string]any{"effect": "allow", "credentials": fresh}, nil

	case r.Method == "POST" && p == "/sessions/streams/heartbeat":
		sid, turn := str("session_id"), str("turn_id")
		if sid == "" || str("replica_id") == "" {
			return http.StatusUnprocessableEntity, detail("session_id and replica_id are required"), nil
		}
		// Every beat claims the owner key, never stealing it from a live
		// different owner; a replica that lost the claim learns the owner
		// and changes nothing (claim_owner in core/sessions/streams).
		replica, now := str("replica_id"), time.Now()
		if o := f.owners[sid]; o.replica != replica && now.Before(o.until) {
			var stream any
			if f.streams[sid] != "" {
				stream = map[string]any{"id": f.streams[sid], "project_id": f.ProjectID, "session_id": sid, "turn_id": f.current[sid]}
			}
			return 200, map[string]any{"stream": stream, "replica_id": o.replica, "is_current_turn": false}, nil
		}
		f.owners[sid] = owner{replica: replica, until: now.Add(OwnerTTL)}
		if f.streams[sid] == "" {
			f.streams[sid] = id
		}
		current := true
		if turn != "" {
			if f.stopped[sid] && f.current[sid] == turn {
				current = false
			} else if f.current[sid] == "" || f.current[sid] != turn && !f.stopped[sid] {
				f.current[sid] = turn
			}
		}
		stream := map[string]any{"id": f.streams[sid], "project_id": f.ProjectID, "session_id": sid, "turn_id": f.current[sid]}
		return 200, map[string]any{"stream": stream, "replica_id": str("replica_id"), "is_current_turn": current}, nil

	case r.Method == "POST" && p == "/sessions/records/ingest":
		var rec Record
		if err := json.Unmarshal(body, &rec); err != nil || rec.SessionID == "" || rec.RecordType == "" || len(rec.Attributes) == 0 {
			return http.StatusUnprocessableEntity, detail("invalid record"), nil
		}
		for i := range f.records {
			if rec.RecordID != "" && f.records[i].RecordID == rec.RecordID {
				f.records[i] = rec // upsert
				return 200, map[string]any{"ok": true}, nil
			}
		}
		f.records = append(f.records, rec)
		return 200, map[string]any{"ok": true}, nil

	case r.Method == "POST" && p == "/sessions/interactions/":
		var i Interaction
		if err := json.Unmarshal(body, &i); err != nil || i.Token == "" || i.SessionID == "" {
			return http.StatusUnprocessableEntity, detail("invalid interaction"), nil
		}
		for _, old := range f.interactions {
			if old.Token == i.Token && old.SessionID == i.SessionID {
				return 200, map[string]any{"count": 1, "interaction": old}, nil
			}
		}
		i.ID, i.Status = id, "pending"
		f.interactions = append(f.interactions, &i)
		return 200, map[string]any{"count": 1, "interaction": i}, nil

	case r.Method == "POST" && p == "/sessions/interactions/transition":
		for _, i := range f.interactions {
			if i.SessionID == str("session_id") && i.Token == str("token") && (i.Status == "pending" || i.Status == "responded") {
				if str("status") == "resolved" && i.Kind != "user_approval" {
					return http.StatusConflict, detail("Resolved status is not valid for " + i.Kind + " interactions"), nil
				}
				i.Status = str("status")
				i.Resolution = in["resolution"]
				return 200, map[string]any{"count": 1, "interaction": i}, nil
			}
		}
		return http.StatusNotFound, detail("Interaction not found or already terminal"), nil

	case r.Method == "POST" && p == "/sessions/interactions/cancel-stale":
		var tokens []string
		_ = json.Unmarshal(in["tokens"], &tokens)
		n := 0
		for _, i := range f.interactions {
			spared := i.TurnID == str("turn_id")
			for _, t := range tokens {
				spared = spared || t == i.Token
			}
			if i.SessionID == str("session_id") && i.Status == "pending" && !spared {
				i.Status = "cancelled"
				n++
			}
		}
		return 200, map[string]any{"cancelled": n}, nil

	case r.Method == "POST" && p == "/sessions/turns/":
		var idx int
		_ = json.Unmarshal(in["turn_index"], &idx)
		key := fmt.Sprintf("%s:%06d", str("session_id"), idx)
		if _, dup := f.turns[key]; dup {
			return http.StatusConflict, detail("turn already exists"), nil
		}
		f.turns[key] = body
		return 200, map[string]any{"count": 1, "turn": json.RawMessage(body)}, nil

	case r.Method == "POST" && p == "/sessions/turns/complete":
		var idx int
		_ = json.Unmarshal(in["turn_index"], &idx)
		key := fmt.Sprintf("%s:%06d", str("session_id"), idx)
		if _, ok := f.completed[key]; !ok { // first completion wins
			f.completed[key] = body
		}
		return 200, map[string]any{"count": 1}, nil

	case r.Method == "GET" && strings.HasPrefix(p, "/sessions/attachments/") && strings.HasSuffix(p, "/content"):
		aid := strings.TrimSuffix(strings.TrimPrefix(p, "/sessions/attachments/"), "/content")
		a, ok := f.attachments[aid]
		if !ok || r.URL.Query().Get("session_id") == "" {
			return http.StatusNotFound, detail("Attachment not found"), nil
		}
		return 200, a.Data, map[string]string{"Content-Type": a.MediaType, "Content-Disposition": `attachment; filename="` + a.Filename + `"`}

	case r.Method == "POST" && p == "/sessions/attachments/reference":
		var ids []string
		_ = json.Unmarshal(in["attachment_ids"], &ids)
		return 200, map[string]any{"count": len(ids)}, nil

	case r.Method == "POST" && (p == "/sessions/mounts/sign" || p == "/mounts/agents/sign"):
		q := r.URL.Query()
		mount := map[string]any{"id": id, "project_id": f.ProjectID, "name": q.Get("name")}
		if p == "/sessions/mounts/sign" {
			if q.Get("session_id") == "" {
				return http.StatusUnprocessableEntity, detail("session_id is required"), nil
			}
			mount["session_id"] = q.Get("session_id")
		} else {
			if q.Get("artifact_id") == "" {
				return http.StatusUnprocessableEntity, detail("artifact_id is required"), nil
			}
			mount["agent_id"] = q.Get("artifact_id")
		}
		return 200, map[string]any{"count": 1, "mount": mount, "credentials": map[string]any{
			"endpoint": "http://seaweedfs:8333", "region": "us-east-1", "bucket": "agenta-mounts",
			"prefix": "mounts/" + f.ProjectID + "/" + id, "access_key": "AK" + id[len(id)-6:], "secret_key": "SK-" + id,
			"session_token": "ST-" + id, "expires_at": time.Now().Add(12 * time.Hour).UTC().Format(time.RFC3339),
		}}, nil
	}
	return http.StatusNotFound, detail("Not Found"), nil
}
