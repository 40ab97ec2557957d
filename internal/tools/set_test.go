package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/wire"
)

// received is what a test callback saw.
type received struct {
	Method  string
	Path    string // escaped
	Auth    string
	RunKind string
	Body    json.RawMessage
}

// callback is a test /tools/call server whose answer a test chooses.
type callback struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	hand http.HandlerFunc
}

func newCallback(t *testing.T, h http.HandlerFunc) *callback {
	t.Helper()
	cb := &callback{hand: h}
	cb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		cb.mu.Lock()
		cb.got = append(cb.got, received{Method: r.Method, Path: r.URL.EscapedPath(), Auth: r.Header.Get("Authorization"), RunKind: r.Header.Get("X-Agenta-Run-Kind"), Body: body})
		cb.mu.Unlock()
		cb.hand(w, r)
	}))
	t.Cleanup(cb.Close)
	return cb
}

func (cb *callback) received() []received {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return append([]received(nil), cb.got...)
}

func (cb *callback) host() string {
	u, _ := url.Parse(cb.URL)
	return u.Hostname()
}

func content(s string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(map[string]any{"call": map[string]any{"data": map[string]any{"content": s}, "status": map[string]any{"code": "STATUS_CODE_OK"}}})
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}
}

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// connect serves set over an in-memory transport and returns a client
// session; cleanup closes both and waits for the server.
func connect(t *testing.T, set *tools.Set) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { set.Serve(ctx, st) })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close(); cancel(); wg.Wait() })
	return cs
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("content = %d blocks, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	return tc.Text
}

var schema = json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)

// recorder collects OnCall records.
type recorder struct {
	mu   sync.Mutex
	recs []tools.CallRecord
}

func (r *recorder) add(c tools.CallRecord) { r.mu.Lock(); r.recs = append(r.recs, c); r.mu.Unlock() }
func (r *recorder) last(t *testing.T) tools.CallRecord {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recs) == 0 {
		t.Fatal("no call recorded")
	}
	return r.recs[len(r.recs)-1]
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	cb := newCallback(t, content(`{"issues":[1,2]}`))
	var rec recorder
	cfg := tools.Config{HostAllowlist: []string{cb.host()}, RunKind: "test", OnCall: rec.add}
	specs := []wire.ToolSpec{
		{Name: "search", Description: "find things", InputSchema: schema, CallRef: "tools.composio.github.search.conn", EphemeralArgs: []string{"description"}, ReadOnly: true},
		{Name: "plain", InputSchemaAlt: schema},
	}
	set, err := tools.New(cfg, specs, &wire.ToolCallback{Endpoint: cb.URL + "/tools/call", Authorization: "tok123"}, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer set.Close()
	cs := connect(t, set)

	lt, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
		if tl.Name == "search" && (tl.Annotations == nil || !tl.Annotations.ReadOnlyHint) {
			t.Errorf("search lost its read-only hint")
		}
	}
	if diff := cmp.Diff([]string{"plain", "search"}, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
		Meta:      mcp.Meta{"claudecode/toolUseId": "toolu_1"},
		Name:      "search",
		Arguments: map[string]any{"q": "bug", "description": "why I search"},
	})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if res.IsError || text(t, res) != `{"issues":[1,2]}` {
		t.Errorf("result = %v %q, want the content", res.IsError, text(t, res))
	}
	got := cb.received()
	if len(got) != 1 {
		t.Fatalf("callback got %d requests, want 1", len(got))
	}
	var body any
	json.Unmarshal(got[0].Body, &body)
	want := map[string]any{"data": map[string]any{"id": "toolu_1", "type": "function",
		"function": map[string]any{"name": "tools.composio.github.search.conn", "arguments": map[string]any{"q": "bug"}}}}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("callback body (-want +got):\n%s", diff)
	}
	if got[0].Auth != "Bearer tok123" || got[0].RunKind != "test" {
		t.Errorf("headers: Authorization %q, run kind %q", got[0].Auth, got[0].RunKind)
	}
	r := rec.last(t)
	if r.Tool != "search" || r.ID != "toolu_1" || r.Outcome != tools.OutcomeOK || r.Status != 200 || r.Err != "" {
		t.Errorf("record = %+v", r)
	}

	// No callRef: the spec name goes in function.name; a scheme is kept.
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "plain", Arguments: map[string]any{"q": "x"}}); err != nil {
		t.Fatalf("CallTool plain: %v", err)
	}
	json.Unmarshal(cb.received()[1].Body, &body)
	fn := body.(map[string]any)["data"].(map[string]any)["function"].(map[string]any)
	if fn["name"] != "plain" {
		t.Errorf("function.name = %v, want plain", fn["name"])
	}
	if id := rec.last(t).ID; !strings.HasPrefix(id, "call_") {
		t.Errorf("generated call id = %q", id)
	}
}

func TestAuthorizationWithScheme(t *testing.T) {
	t.Parallel()
	cb := newCallback(t, content("ok"))
	set, err := tools.New(tools.Config{HostAllowlist: []string{cb.host()}},
		[]wire.ToolSpec{{Name: "t"}}, &wire.ToolCallback{Endpoint: cb.URL, Authorization: "ApiKey abc"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, set)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	if got := cb.received()[0].Auth; got != "ApiKey abc" {
		t.Errorf("Authorization = %q, want it verbatim", got)
	}
}

func TestCallFailures(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", 80_000) // 160,000 bytes
	tests := []struct {
		name    string
		handler http.HandlerFunc
		cfg     tools.Config
		args    map[string]any
		check   func(context.Context, tools.Call) error
		outcome tools.Outcome
		isError bool
		text    string // substring of the model-facing text
		trunc   bool
	}{
		{
			name:    "timeout",
			handler: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			cfg:     tools.Config{DefaultTimeout: 1}, // 1ns: expires at once
			outcome: tools.OutcomeTimeout, isError: true, text: "no answer within",
		},
		{
			name:    "http 500",
			handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "secret internals", 500) },
			outcome: tools.OutcomeError, isError: true, text: "tool t failed: HTTP 500",
		},
		{
			name: "redirect is not followed",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
			},
			outcome: tools.OutcomeError, isError: true, text: "HTTP 302",
		},
		{
			name:    "invalid json",
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>proxy error</html>") },
			outcome: tools.OutcomeError, isError: true, text: "invalid JSON",
		},
		{
			name: "tool-reported error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"call":{"data":{"content":"{\"error\":\"bad repo\"}"},"status":{"code":"STATUS_CODE_ERROR","message":"not found"}}}`)
			},
			outcome: tools.OutcomeError, isError: true, text: "not found\n{\"error\":\"bad repo\"}",
		},
		{
			name:    "oversized result is cut and marked",
			handler: content(big),
			outcome: tools.OutcomeOK, text: "bytes omitted]\n\nThis result was too large", trunc: true,
		},
		{
			name:    "raw body over the cap",
			handler: content(big),
			cfg:     tools.Config{MaxResponseBytes: 1000},
			outcome: tools.OutcomeError, isError: true, text: "response larger than 1000 bytes",
		},
		{
			name: "object content is passed as JSON",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"call":{"data":{"content":{"a":1}}}}`)
			},
			outcome: tools.OutcomeOK, text: `{"a":1}`,
		},
		{
			name:    "check refuses",
			handler: content("never"),
			check: func(_ context.Context, c tools.Call) error {
				return errors.New("denied by policy: " + c.Tool + " " + string(c.Args))
			},
			args:    map[string]any{"q": "x"},
			outcome: tools.OutcomeRefused, isError: true, text: `denied by policy: t {"q":"x"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cb := newCallback(t, tt.handler)
			var rec recorder
			cfg := tt.cfg
			cfg.HostAllowlist, cfg.OnCall, cfg.Check = []string{cb.host()}, rec.add, tt.check
			set, err := tools.New(cfg, []wire.ToolSpec{{Name: "t"}}, &wire.ToolCallback{Endpoint: cb.URL}, testLogger(t))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			cs := connect(t, set)
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "t", Arguments: tt.args})
			if err != nil {
				t.Fatalf("CallTool returned a protocol error, want a tool result: %v", err)
			}
			got := text(t, res)
			if res.IsError != tt.isError || !strings.Contains(got, tt.text) {
				t.Errorf("result isError=%v text=%.200q, want isError=%v containing %q", res.IsError, got, tt.isError, tt.text)
			}
			if strings.Contains(got, "secret internals") {
				t.Errorf("upstream body leaked to the model: %q", got)
			}
			if len(got) > tools.DefaultMaxResultBytes {
				t.Errorf("result is %d bytes, over the cap", len(got))
			}
			r := rec.last(t)
			if r.Outcome != tt.outcome || r.Truncated != tt.trunc {
				t.Errorf("record outcome=%q truncated=%v, want %q %v", r.Outcome, r.Truncated, tt.outcome, tt.trunc)
			}
		})
	}
}

func TestTruncationKeepsUTF8(t *testing.T) {
	t.Parallel()
	cb := newCallback(t, content(strings.Repeat("é", 1000)))
	set, err := tools.New(tools.Config{HostAllowlist: []string{cb.host()}, MaxResultBytes: 301},
		[]wire.ToolSpec{{Name: "t"}}, &wire.ToolCallback{Endpoint: cb.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := connect(t, set).CallTool(t.Context(), &mcp.CallToolParams{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	got := text(t, res)
	if len(got) > 301 || !strings.Contains(got, " [... ") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("cut result = %d bytes %q", len(got), got)
	}
	// The cut is at a rune boundary: what precedes the marker is whole é's.
	prefix, _, _ := strings.Cut(got, " [... ")
	if strings.Trim(prefix, "é") != "" {
		t.Errorf("prefix %q is not whole runes", prefix)
	}
}

func TestInvalidArgs(t *testing.T) {
	t.Parallel()
	cb := newCallback(t, content("never"))
	var rec recorder
	set, err := tools.New(tools.Config{HostAllowlist: []string{cb.host()}, OnCall: rec.add},
		[]wire.ToolSpec{{Name: "t"}, {Name: "req", InputSchema: schema}}, &wire.ToolCallback{Endpoint: cb.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, set)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "t", Arguments: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || rec.last(t).Outcome != tools.OutcomeInvalid || len(cb.received()) != 0 {
		t.Errorf("array args: isError=%v outcome=%q callbacks=%d", res.IsError, rec.last(t).Outcome, len(cb.received()))
	}
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "req", Arguments: map[string]any{"other": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(t, res), "missing required argument(s): q") || len(cb.received()) != 0 {
		t.Errorf("missing required: isError=%v text=%q callbacks=%d", res.IsError, text(t, res), len(cb.received()))
	}
}

// fakeResolver answers from a script, one answer per lookup; the last
// answer repeats.
type fakeResolver struct {
	mu      sync.Mutex
	answers [][]netip.Addr
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.answers) == 0 {
		return nil, errors.New("no such host " + host)
	}
	a := f.answers[0]
	if len(f.answers) > 1 {
		f.answers = f.answers[1:]
	}
	return a, nil
}

func addrs(ss ...string) []netip.Addr {
	var as []netip.Addr
	for _, s := range ss {
		as = append(as, netip.MustParseAddr(s))
	}
	return as
}

// TestCallbackTrusted: the tool callback is the platform's own API, on
// loopback or a private service address in every compose and cluster
// deployment. New refuses none of them and resolves nothing; a host that
// does not resolve fails the call, as a tool error the model reads.
func TestCallbackTrusted(t *testing.T) {
	t.Parallel()
	for _, ep := range []string{"http://127.0.0.1:8080/tools/call", "http://api:8000/api/tools/call", "http://10.1.2.3/tools/call", "http://nowhere.example/x"} {
		if _, err := tools.New(tools.Config{Resolver: &fakeResolver{}}, []wire.ToolSpec{{Name: "t"}}, &wire.ToolCallback{Endpoint: ep}, nil); err != nil {
			t.Errorf("New(%s): %v, want the trusted callback admitted", ep, err)
		}
	}

	// Loopback without any allowlist entry: the call reaches it.
	cb := newCallback(t, content("from the platform"))
	set, err := tools.New(tools.Config{}, []wire.ToolSpec{{Name: "t"}}, &wire.ToolCallback{Endpoint: cb.URL + "/tools/call"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := connect(t, set).CallTool(t.Context(), &mcp.CallToolParams{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if out.IsError || text(t, out) != "from the platform" || len(cb.received()) != 1 {
		t.Errorf("loopback callback: isError=%v text=%q callbacks=%d", out.IsError, text(t, out), len(cb.received()))
	}

	// A host resolved at call time: unresolvable is a tool error naming it.
	var rec recorder
	set, err = tools.New(tools.Config{Resolver: &fakeResolver{}, OnCall: rec.add}, []wire.ToolSpec{{Name: "t"}},
		&wire.ToolCallback{Endpoint: "http://api.invalid:8000/tools/call"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err = connect(t, set).CallTool(t.Context(), &mcp.CallToolParams{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !out.IsError || !strings.Contains(text(t, out), "api.invalid") || rec.last(t).Outcome != tools.OutcomeError {
		t.Errorf("unresolvable callback: isError=%v text=%q outcome=%q", out.IsError, text(t, out), rec.last(t).Outcome)
	}
}

// TestCheckMCPServer: user MCP servers, which the harness dials from the
// sandbox, are refused at admission on non-public addresses and plain
// http unless allowlisted, with a message naming the variable.
func TestCheckMCPServer(t *testing.T) {
	t.Parallel()
	public := &fakeResolver{answers: [][]netip.Addr{addrs("93.184.216.34")}}
	tests := []struct {
		name     string
		url      string
		resolver tools.Resolver
		allow    []string
		class    error
		blocked  bool
		msg      string
	}{
		{name: "loopback literal", url: "https://127.0.0.1:8080/mcp", class: errdefs.ErrInvalid, blocked: true},
		{name: "localhost name", url: "https://localhost/mcp", class: errdefs.ErrInvalid, blocked: true},
		{name: "private", url: "https://10.0.0.7/mcp", class: errdefs.ErrInvalid, blocked: true},
		{name: "link-local", url: "https://[fe80::1]/mcp", class: errdefs.ErrInvalid, blocked: true},
		{name: "cgnat", url: "https://100.64.1.2/mcp", class: errdefs.ErrInvalid, blocked: true},
		{name: "metadata", url: "https://169.254.169.254/latest", class: errdefs.ErrInvalid, blocked: true},
		{name: "mapped v6", url: "https://[::ffff:10.0.0.1]/x", class: errdefs.ErrInvalid, blocked: true},
		{name: "one private answer among public", url: "https://mcp.example/x",
			resolver: &fakeResolver{answers: [][]netip.Addr{addrs("93.184.216.34", "10.1.2.3")}}, class: errdefs.ErrInvalid, blocked: true},
		{name: "plain http public", url: "http://mcp.example/x", resolver: public, class: errdefs.ErrInvalid, msg: "https is required"},
		{name: "unresolvable", url: "https://nowhere.example/x", resolver: &fakeResolver{}, class: errdefs.ErrUnavailable, msg: "nowhere.example"},
		{name: "not http", url: "ftp://mcp.example/x", class: errdefs.ErrInvalid, msg: "http(s)"},
		{name: "public https ok", url: "https://mcp.example/x", resolver: public},
		{name: "allowlisted private http ok", url: "http://MCP.internal:8000/x", allow: []string{"mcp.internal"}},
		{name: "allowlisted loopback ok", url: "http://127.0.0.1:9/x", allow: []string{"127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tools.CheckMCPServer(t.Context(), tools.Config{Resolver: tt.resolver, HostAllowlist: tt.allow}, tt.url)
			if tt.class == nil {
				if err != nil {
					t.Fatalf("CheckMCPServer: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.class) || errors.Is(err, tools.ErrBlocked) != tt.blocked || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("CheckMCPServer error = %v, want class %v, blocked %v, containing %q", err, tt.class, tt.blocked, tt.msg)
			}
			if (tt.blocked || strings.Contains(tt.msg, "https")) && !strings.Contains(err.Error(), "AGENTA_AGENT_MCPS_HOST_ALLOWLIST") {
				t.Errorf("error does not say how to allow the host: %v", err)
			}
		})
	}
}

func TestNewValidatesSpecs(t *testing.T) {
	t.Parallel()
	cb := &wire.ToolCallback{Endpoint: "http://api.internal/x"}
	cfg := tools.Config{HostAllowlist: []string{"api.internal"}}
	tests := []struct {
		name  string
		specs []wire.ToolSpec
		cb    *wire.ToolCallback
		class error
		msg   string
	}{
		{name: "no specs need no callback", specs: nil, cb: nil},
		{name: "callback tools need an endpoint", specs: []wire.ToolSpec{{Name: "a"}}, cb: nil, class: errdefs.ErrInvalid, msg: "toolCallback.endpoint"},
		{name: "duplicate", specs: []wire.ToolSpec{{Name: "a"}, {Name: "a"}}, cb: cb, class: errdefs.ErrInvalid, msg: "duplicate"},
		{name: "bad name", specs: []wire.ToolSpec{{Name: "a b"}}, cb: cb, class: errdefs.ErrInvalid, msg: "invalid character"},
		{name: "empty name", specs: []wire.ToolSpec{{Name: ""}}, cb: cb, class: errdefs.ErrInvalid, msg: "empty name"},
		{name: "code", specs: []wire.ToolSpec{{Name: "a", Kind: "code"}}, cb: cb, class: errdefs.ErrUnprocessable, msg: `kind "code" is not supported`},
		{name: "unknown kind", specs: []wire.ToolSpec{{Name: "a", Kind: "magic"}}, cb: cb, class: errdefs.ErrInvalid, msg: "unknown kind"},
		{name: "call and callRef", specs: []wire.ToolSpec{{Name: "a", CallRef: "x", Call: json.RawMessage(`{"method":"GET","path":"/x"}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "both call and callRef"},
		{name: "direct method", specs: []wire.ToolSpec{{Name: "a", Call: json.RawMessage(`{"method":"PATCH","path":"/x"}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "not allowed"},
		{name: "direct protocol-relative path", specs: []wire.ToolSpec{{Name: "a", Call: json.RawMessage(`{"method":"GET","path":"//evil.example/x"}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "single /"},
		{name: "direct traversal", specs: []wire.ToolSpec{{Name: "a", Call: json.RawMessage(`{"method":"GET","path":"/api/../admin"}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "not a safe path"},
		{name: "direct context token", specs: []wire.ToolSpec{{Name: "a", Call: json.RawMessage(`{"method":"POST","path":"/x","context":{"a":"project.id"}}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "$ctx."},
		{name: "direct unsafe args_into", specs: []wire.ToolSpec{{Name: "a", Call: json.RawMessage(`{"method":"POST","path":"/x","args_into":"__proto__.x"}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "unsafe segment"},
		{name: "bindings unsafe", specs: []wire.ToolSpec{{Name: "a", ContextBindings: json.RawMessage(`{"a..b":"$ctx.x"}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "empty segment"},
		{name: "direct valid", specs: []wire.ToolSpec{{Name: "a", Call: json.RawMessage(`{"method":"POST","path":"/api/x/{id}","body":{"k":1},"context":{"p":"$ctx.project.id"},"args_into":"data.inputs"}`)}}, cb: cb},
		{name: "schema not object", specs: []wire.ToolSpec{{Name: "a", InputSchema: json.RawMessage(`[1]`)}}, cb: cb, class: errdefs.ErrInvalid, msg: "not a JSON object"},
		{name: "schema type string", specs: []wire.ToolSpec{{Name: "a", InputSchema: json.RawMessage(`{"type":"string"}`)}}, cb: cb, class: errdefs.ErrInvalid, msg: `"type": "object"`},
		{name: "every problem at once", specs: []wire.ToolSpec{{Name: "a b"}, {Name: "c", Kind: "code"}}, cb: cb, class: errdefs.ErrInvalid, msg: "customTools[1]"},
		{name: "valid", specs: []wire.ToolSpec{{Name: "a.b-c_d", InputSchema: schema}, {Name: "e"}}, cb: cb},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tools.New(cfg, tt.specs, tt.cb, nil)
			if tt.class == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("New error = %v, want class %v containing %q", err, tt.class, tt.msg)
			}
		})
	}
}

func TestCloseCancelsCallsInFlight(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	cb := newCallback(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	var rec recorder
	set, err := tools.New(tools.Config{HostAllowlist: []string{cb.host()}, OnCall: rec.add},
		[]wire.ToolSpec{{Name: "t"}}, &wire.ToolCallback{Endpoint: cb.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, set)
	var wg sync.WaitGroup
	wg.Go(func() { <-arrived; set.Close() })
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "t"})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(t, res), "the turn ended") || rec.last(t).Outcome != tools.OutcomeCancelled {
		t.Errorf("in-flight call after Close: isError=%v text=%q outcome=%q", res.IsError, text(t, res), rec.last(t).Outcome)
	}
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || len(cb.received()) != 1 {
		t.Errorf("call after Close: isError=%v callbacks=%d", res.IsError, len(cb.received()))
	}
}
