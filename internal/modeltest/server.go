// Package modeltest is a fake model server for tests. One server on
// 127.0.0.1 speaks the four provider APIs the real harnesses call, with the
// SSE framing each one's SDK parses: OpenAI Chat Completions
// (/v1/chat/completions), OpenAI Responses (/v1/responses), Anthropic
// Messages (/v1/messages, /v1/messages/count_tokens) and Gemini
// (/v1beta/models/{model}:streamGenerateContent?alt=sse, :generateContent,
// :countTokens). Routes match on the path's suffix, so a base URL with a
// prefix works too.
//
// Each model call is reduced to a Request (the last real user text, the
// tool results that came back since, the tools offered) and answered with
// the Reply of the test's script, Default unless WithScript says otherwise.
// Auxiliary calls (title generation, prompt suggestions, quota checks,
// structured-output side calls) are answered by the server itself and
// never reach the script, so a script sees only the turn's own calls.
// Every request is recorded for assertions.
package modeltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Server is a running fake model server. Close it with Close, or let the
// test's cleanup do it.
type Server struct {
	// URL is the server's root, http://127.0.0.1:port. The OpenAI base URL
	// is URL+"/v1"; Anthropic and Gemini take URL as it is.
	URL string
	// Addr is host:port, for a network allowlist.
	Addr string

	script     func(Request) Reply
	noEscalate bool
	hs         *httptest.Server
	done       chan struct{}
	close      sync.Once
	seq        atomic.Int64

	mu   sync.Mutex
	recs []Recorded
}

// Option configures New.
type Option func(*Server)

// WithScript answers every model call with script. A script that wants the
// default behaviour for some calls returns Default(r) for them. It runs on
// the server's handler goroutines, so calls can overlap: a script that
// keeps state guards it.
func WithScript(script func(Request) Reply) Option {
	return func(s *Server) { s.script = script }
}

// WithError fails every model call with status and message, in the
// calling API's error shape. Auxiliary calls are still answered.
func WithError(status int, message string) Option {
	return WithScript(func(Request) Reply {
		return Reply{Err: &Error{Status: status, Message: message}}
	})
}

// WithoutEscalation makes the default shell call a plain one for Codex
// too, without sandbox_permissions: Codex in agent-full-access mode
// rejects escalation requests ("you cannot ask for escalated permissions
// if the approval policy is Never") and runs plain commands unsandboxed.
func WithoutEscalation() Option {
	return func(s *Server) { s.noEscalate = true }
}

// New starts a server on 127.0.0.1 and closes it when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{script: Default, done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	s.hs = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.hs.URL
	s.Addr = s.hs.Listener.Addr().String()
	t.Cleanup(s.Close)
	return s
}

// Close stops the server. Replies still waiting out a Delay end at once.
func (s *Server) Close() {
	s.close.Do(func() {
		close(s.done)
		s.hs.CloseClientConnections()
		s.hs.Close()
	})
}

// OpenAIBaseURL is the base URL an OpenAI client takes (URL+"/v1").
func (s *Server) OpenAIBaseURL() string { return s.URL + "/v1" }

// Recorded is one request the server received.
type Recorded struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	// Body is the parsed JSON body; nil when there was none or it was not JSON.
	Body map[string]any
	Raw  []byte
	// Request is the call as the server understood it. API is empty for a
	// path the server does not serve (it answered 404).
	Request
	// Reply is what the server answered.
	Reply Reply
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.recs...)
}

// Calls returns the recorded model calls that reached the script: Aux and
// side endpoints (count_tokens, models) are left out.
func (s *Server) Calls() []Recorded {
	var out []Recorded
	for _, r := range s.Requests() {
		if r.API != "" && r.Aux == "" && r.Kind == KindModel {
			out = append(out, r)
		}
	}
	return out
}

func (s *Server) record(r Recorded) {
	s.mu.Lock()
	s.recs = append(s.recs, r)
	s.mu.Unlock()
}

// id returns a fresh id with prefix, unique within the server.
func (s *Server) id(prefix string) string {
	return fmt.Sprintf("%s_%04d", prefix, s.seq.Add(1))
}

// route is what a path asks for.
type route struct {
	api   API
	kind  Kind
	model string // Gemini: from the path
	sse   bool   // Gemini: the stream method
}

func match(path string) (route, bool) {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return route{api: ChatCompletions, kind: KindModel}, true
	case strings.HasSuffix(path, "/responses"):
		return route{api: Responses, kind: KindModel}, true
	case strings.HasSuffix(path, "/messages"):
		return route{api: Messages, kind: KindModel}, true
	case strings.HasSuffix(path, "/messages/count_tokens"):
		return route{api: Messages, kind: KindCountTokens}, true
	case strings.HasSuffix(path, "/models"):
		return route{api: ChatCompletions, kind: KindModels}, true
	}
	if i := strings.Index(path, "/models/"); i >= 0 && strings.Contains(path, "/v1") {
		model, method, ok := strings.Cut(path[i+len("/models/"):], ":")
		if !ok {
			return route{}, false
		}
		r := route{api: Gemini, model: model}
		switch method {
		case "streamGenerateContent":
			r.kind, r.sse = KindModel, true
		case "generateContent":
			r.kind = KindModel
		case "countTokens":
			r.kind = KindCountTokens
		default:
			return route{}, false
		}
		return r, true
	}
	return route{}, false
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	rec := Recorded{
		Method: r.Method,
		Path:   r.URL.Path,
		Query:  r.URL.RawQuery,
		Header: r.Header.Clone(),
		Raw:    raw,
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		_ = json.Unmarshal(raw, &rec.Body)
	}
	rt, ok := match(r.URL.Path)
	if !ok {
		rec.Reply = Reply{Err: &Error{Status: http.StatusNotFound, Message: "modeltest: no route for " + r.Method + " " + r.URL.Path}}
		s.record(rec)
		writeError(w, apiForPath(r.URL.Path), *rec.Reply.Err)
		return
	}
	rec.API, rec.Kind = rt.api, rt.kind
	if rt.kind == KindModels {
		rec.Reply = Reply{}
		s.record(rec)
		writeJSON(w, map[string]any{"object": "list", "data": []any{}})
		return
	}
	if rec.Body == nil {
		rec.Reply = Reply{Err: &Error{Status: http.StatusBadRequest, Message: "modeltest: request body is not a JSON object"}}
		s.record(rec)
		writeError(w, rt.api, *rec.Reply.Err)
		return
	}
	req, schema := parse(rt, rec.Body)
	req.Kind, req.Escalate = rt.kind, !s.noEscalate
	rec.Request = req
	if rt.kind == KindCountTokens {
		s.record(rec)
		n := tokens(string(raw))
		if rt.api == Gemini {
			writeJSON(w, map[string]any{"totalTokens": n})
		} else {
			writeJSON(w, map[string]any{"input_tokens": n})
		}
		return
	}
	var reply Reply
	if req.Aux != "" {
		reply = auxReply(req, schema)
	} else {
		reply = s.script(req)
	}
	reply.ToolCalls = slices.Clone(reply.ToolCalls)
	for i := range reply.ToolCalls {
		c := &reply.ToolCalls[i]
		if c.ID == "" && rt.api == Messages {
			c.ID = s.id("toolu")
		} else if c.ID == "" {
			c.ID = s.id("call")
		}
		if len(c.Args) == 0 {
			c.Args = json.RawMessage("{}")
		}
	}
	rec.Reply = reply
	s.record(rec)
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.done:
			t.Stop()
			return
		}
	}
	if reply.Err != nil {
		writeError(w, rt.api, *reply.Err)
		return
	}
	out := answer{s: s, req: req, body: rec.Body, reply: reply, inTokens: tokens(string(raw))}
	switch rt.api {
	case ChatCompletions:
		out.chat(w)
	case Responses:
		out.responses(w)
	case Messages:
		out.messages(w)
	case Gemini:
		out.gemini(w)
	}
}

// apiForPath guesses the error shape for a path no route matched.
func apiForPath(path string) API {
	switch {
	case strings.Contains(path, "/v1beta"):
		return Gemini
	case strings.Contains(path, "/messages"):
		return Messages
	}
	return ChatCompletions
}

// answer renders one reply in one API's format.
type answer struct {
	s        *Server
	req      Request
	body     map[string]any
	reply    Reply
	inTokens int
}

func (a answer) outTokens() int {
	n := tokens(a.reply.Text)
	for _, c := range a.reply.ToolCalls {
		n += tokens(string(c.Args))
	}
	return max(n, 1)
}

// tokens is a rough token count: four bytes a token.
func tokens(s string) int { return (len(s) + 3) / 4 }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// stream writes server-sent events, flushing after each.
type stream struct {
	w http.ResponseWriter
}

func newStream(w http.ResponseWriter) stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	return stream{w: w}
}

// event writes one event: an "event:" line when name is set, then the
// "data:" line with v as JSON, then the blank line that ends the event.
func (s stream) event(name string, v any) {
	s.data(name, string(marshal(v)))
}

func (s stream) data(name, data string) {
	var buf strings.Builder
	if name != "" {
		buf.WriteString("event: " + name + "\n")
	}
	buf.WriteString("data: " + data + "\n\n")
	_, _ = io.WriteString(s.w, buf.String())
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// chunks splits text into pieces of a few words each, keeping every byte,
// so a stream carries more than one delta.
func chunks(text string) []string {
	if text == "" {
		return nil
	}
	var out []string
	words := strings.SplitAfter(text, " ")
	for len(words) > 0 {
		n := min(2, len(words))
		out = append(out, strings.Join(words[:n], ""))
		words = words[n:]
	}
	return out
}

// halves splits s in two non-empty parts when it can.
func halves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	return []string{s[:len(s)/2], s[len(s)/2:]}
}
