package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/tools/relay"
	"github.com/agentrunner/runner/internal/wire"
)

// TestMain re-executes the test binary as `runner mcp-stdio` when asked,
// so tests drive the real in-sandbox side as a subprocess.
func TestMain(m *testing.M) {
	if os.Getenv("RUNNER_TEST_MCP_STDIO") == "1" {
		os.Exit(relay.MCPStdio(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m, leaktest.Global()...)
}

type env struct {
	relay  *relay.Relay
	socket string
	logs   *runnertest.SyncBuffer
}

// startRelay serves a relay on a fresh socket until the test ends.
func startRelay(t testing.TB) *env {
	t.Helper()
	// Unix socket paths are short (108 bytes); t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "relay")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "tools.sock")
	ln, err := relay.Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	logs := &runnertest.SyncBuffer{}
	r := relay.New(slog.New(slog.NewTextHandler(io.MultiWriter(logs, output(t)), nil)))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Serve(ctx, ln); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &env{relay: r, socket: path, logs: logs}
}

func output(t testing.TB) io.Writer {
	if tt, ok := t.(*testing.T); ok {
		return tt.Output()
	}
	return io.Discard
}

// stdioClient spawns the test binary as mcp-stdio with the given env and
// connects a real MCP client to it.
func stdioClient(t testing.TB, envs ...string) (*mcp.ClientSession, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "RUNNER_TEST_MCP_STDIO=1")
	cmd.Env = append(cmd.Env, envs...)
	var stderr runnertest.SyncBuffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "harness", Version: "0"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, errors.Join(err, errors.New("stderr: "+stderr.String()))
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Logf("close mcp-stdio: %v; stderr: %s", err, stderr.String())
		}
	})
	return cs, nil
}

func clientFor(t testing.TB, e *env, b *relay.Binding) *mcp.ClientSession {
	t.Helper()
	cs, err := stdioClient(t, relay.EnvSocket+"="+e.socket, relay.EnvToken+"="+b.Token())
	if err != nil {
		t.Fatalf("connect through mcp-stdio: %v", err)
	}
	return cs
}

type received struct {
	Auth string
	Body map[string]any
}

// callback is a /tools/call test server; the tool's "mode" argument picks
// its behaviour.
type callback struct {
	*httptest.Server
	mu  sync.Mutex
	got []received
}

func newCallback(t testing.TB) *callback {
	cb := &callback{}
	cb.Server = httptest.NewServer(http.HandlerFunc(cb.serve))
	t.Cleanup(cb.Close)
	return cb
}

func (cb *callback) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	cb.mu.Lock()
	cb.got = append(cb.got, received{Auth: r.Header.Get("Authorization"), Body: body})
	cb.mu.Unlock()
	mode, _ := dig(body, "data", "function", "arguments", "mode").(string)
	switch mode {
	case "hang":
		<-r.Context().Done()
		return
	case "500":
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	case "big":
		writeContent(w, strings.Repeat("x", 250_000))
		return
	}
	writeContent(w, `{"ok":true}`)
}

func writeContent(w http.ResponseWriter, s string) {
	b, _ := json.Marshal(map[string]any{"call": map[string]any{"data": map[string]any{"content": s}}})
	w.Write(b)
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
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

func newSet(t testing.TB, cb *callback, auth string, cfg tools.Config, names ...string) *tools.Set {
	t.Helper()
	if len(names) == 0 {
		names = []string{"lookup"}
	}
	var specs []wire.ToolSpec
	for _, n := range names {
		specs = append(specs, wire.ToolSpec{Name: n, CallRef: "tools.test." + n, InputSchema: json.RawMessage(`{"type":"object","properties":{"mode":{"type":"string"}}}`)})
	}
	cfg.HostAllowlist = append(cfg.HostAllowlist, cb.host())
	set, err := tools.New(cfg, specs, &wire.ToolCallback{Endpoint: cb.URL + "/tools/call", Authorization: auth}, nil)
	if err != nil {
		t.Fatalf("tools.New: %v", err)
	}
	t.Cleanup(set.Close)
	return set
}

func resultText(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("content has %d blocks", len(res.Content))
	}
	return res.Content[0].(*mcp.TextContent).Text
}

func TestToolCallsThroughMCPStdio(t *testing.T) {
	t.Parallel()
	e := startRelay(t)
	cb := newCallback(t)
	var mu sync.Mutex
	var recs []tools.CallRecord
	set := newSet(t, cb, "Bearer turn-1", tools.Config{
		OnCall: func(r tools.CallRecord) { mu.Lock(); recs = append(recs, r); mu.Unlock() },
	})
	b := e.relay.Bind(set, nil)
	t.Cleanup(b.Close)
	cs := clientFor(t, e, b)

	lt, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	if len(lt.Tools) != 1 || lt.Tools[0].Name != "lookup" {
		t.Fatalf("tools = %+v", lt.Tools)
	}

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
		Meta: mcp.Meta{"claudecode/toolUseId": "toolu_42"}, Name: "lookup", Arguments: map[string]any{"q": "x"},
	})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if res.IsError || resultText(t, res) != `{"ok":true}` {
		t.Errorf("result = %v %q", res.IsError, resultText(t, res))
	}
	got := cb.received()
	want := []received{{Auth: "Bearer turn-1", Body: map[string]any{"data": map[string]any{
		"id": "toolu_42", "type": "function",
		"function": map[string]any{"name": "tools.test.lookup", "arguments": map[string]any{"q": "x"}},
	}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("callback received (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		mode, text string
		outcome    tools.Outcome
	}{
		{"500", "tool lookup failed: HTTP 500", tools.OutcomeError},
		{"big", "bytes omitted]", tools.OutcomeOK},
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"mode": tc.mode}})
		if err != nil {
			t.Fatalf("%s: CallTool: %v", tc.mode, err)
		}
		txt := resultText(t, res)
		if !strings.Contains(txt, tc.text) || len(txt) > tools.DefaultMaxResultBytes || res.IsError != (tc.outcome != tools.OutcomeOK) {
			t.Errorf("%s: isError=%v text=%.120q (%d bytes)", tc.mode, res.IsError, txt, len(txt))
		}
		mu.Lock()
		last := recs[len(recs)-1]
		mu.Unlock()
		if last.Outcome != tc.outcome || last.Truncated != (tc.mode == "big") {
			t.Errorf("%s: record %+v", tc.mode, last)
		}
	}
}

func TestCallbackTimeoutThroughRelay(t *testing.T) {
	t.Parallel()
	e := startRelay(t)
	cb := newCallback(t)
	set := newSet(t, cb, "x", tools.Config{DefaultTimeout: time.Millisecond})
	b := e.relay.Bind(set, nil)
	t.Cleanup(b.Close)
	res, err := clientFor(t, e, b).CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"mode": "hang"}})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if !res.IsError || !strings.Contains(resultText(t, res), "no answer within") {
		t.Errorf("timeout result = %v %q", res.IsError, resultText(t, res))
	}
}

// TestTrustedLoopbackCallback: through the relay, a loopback callback
// with no allowlist entry is reached (the callback is trusted).
func TestTrustedLoopbackCallback(t *testing.T) {
	t.Parallel()
	cb := newCallback(t)
	e := startRelay(t)
	set, err := tools.New(tools.Config{}, []wire.ToolSpec{{Name: "lookup"}}, &wire.ToolCallback{Endpoint: cb.URL + "/tools/call"}, nil)
	if err != nil {
		t.Fatalf("New with a loopback callback: %v", err)
	}
	defer set.Close()
	b := e.relay.Bind(set, nil)
	t.Cleanup(b.Close)
	out, err := clientFor(t, e, b).CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup"})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if out.IsError || len(cb.received()) != 1 {
		t.Errorf("loopback call: isError=%v %q, callbacks=%d", out.IsError, resultText(t, out), len(cb.received()))
	}
}

func TestWrongSecretRejected(t *testing.T) {
	t.Parallel()
	e := startRelay(t)
	cb := newCallback(t)
	mine := e.relay.Bind(newSet(t, cb, "a", tools.Config{}), nil)
	t.Cleanup(mine.Close)
	other := e.relay.Bind(newSet(t, cb, "b", tools.Config{}), nil)
	closed := e.relay.Bind(newSet(t, cb, "c", tools.Config{}), nil)
	closedToken := closed.Token()
	closed.Close()

	myID, _, _ := strings.Cut(mine.Token(), ".")
	_, otherSecret, _ := strings.Cut(other.Token(), ".")
	tests := []struct{ name, token, logged string }{
		{"other session's secret on my binding", myID + "." + otherSecret, "wrong secret"},
		{"garbage", "nope", "malformed token"},
		{"unknown binding", "AAAA." + otherSecret, "unknown or closed binding"},
		{"closed binding", closedToken, "unknown or closed binding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("unix", e.socket)
			if err != nil {
				t.Fatal(err)
			}
			var stdout bytes.Buffer
			err = relay.Client(t.Context(), conn, tt.token, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`+"\n"), &stdout)
			if !errors.Is(err, relay.ErrUnauthorized) {
				t.Errorf("Client = %v, want ErrUnauthorized", err)
			}
			if stdout.Len() != 0 {
				t.Errorf("refused client got MCP output: %q", stdout.String())
			}
		})
	}
	// The harness's view: mcp-stdio with a wrong secret fails to start.
	if _, err := stdioClient(t, relay.EnvSocket+"="+e.socket, relay.EnvToken+"="+myID+"."+otherSecret); err == nil {
		t.Error("mcp-stdio with another session's secret connected")
	}
	logs := e.logs.String()
	for _, tt := range tests {
		if !strings.Contains(logs, tt.logged) {
			t.Errorf("log lacks %q:\n%s", tt.logged, logs)
		}
	}
	if strings.Contains(logs, otherSecret) {
		t.Error("a secret reached the log")
	}
	// The right token still works after all that.
	if _, err := clientFor(t, e, mine).ListTools(t.Context(), nil); err != nil {
		t.Errorf("ListTools with the right token: %v", err)
	}
}

func TestMCPStdioUsage(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := relay.MCPStdio(t.Context(), nil, func(string) string { return "" }, strings.NewReader(""), io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), relay.EnvSocket) {
		t.Errorf("no env: code %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	getenv := func(k string) string { return map[string]string{relay.EnvToken: "a.b"}[k] }
	code = relay.MCPStdio(t.Context(), []string{"--socket", "/nonexistent/relay.sock"}, getenv, strings.NewReader(""), io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "connect to tool relay") {
		t.Errorf("no socket: code %d, stderr %q", code, stderr.String())
	}
	if code := relay.MCPStdio(t.Context(), []string{"--bogus"}, getenv, strings.NewReader(""), io.Discard, io.Discard); code != 2 {
		t.Errorf("bad flag: code %d, want 2", code)
	}
}

// TestUseSwapsTurns is a warm session: one mcp-stdio process, one
// binding, two turns with different callback credentials and tools.
func TestUseSwapsTurns(t *testing.T) {
	t.Parallel()
	e := startRelay(t)
	cb := newCallback(t)
	b := e.relay.Bind(newSet(t, cb, "turn-1", tools.Config{}), nil)
	t.Cleanup(b.Close)
	cs := clientFor(t, e, b)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup"}); err != nil {
		t.Fatal(err)
	}

	b.Use(nil) // between turns
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(resultText(t, res), "no turn is running") {
		t.Errorf("between turns: %v %q", res.IsError, resultText(t, res))
	}

	b.Use(newSet(t, cb, "turn-2", tools.Config{}, "lookup", "extra"))
	lt, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) != 2 {
		t.Errorf("turn 2 lists %d tools, want 2", len(lt.Tools))
	}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "extra"}); err != nil {
		t.Fatal(err)
	}
	var auths []string
	for _, r := range cb.received() {
		auths = append(auths, r.Auth)
	}
	if diff := cmp.Diff([]string{"Bearer turn-1", "Bearer turn-2"}, auths); diff != "" {
		t.Errorf("authorizations (-want +got):\n%s", diff)
	}
}

// TestServeConnOverPipe runs both ends over an in-memory stream, as the
// remote provider's daemon connection will carry them.
func TestServeConnOverPipe(t *testing.T) {
	t.Parallel()
	cb := newCallback(t)
	r := relay.New(nil)
	b := r.Bind(newSet(t, cb, "p", tools.Config{}), nil)
	t.Cleanup(b.Close)
	runnerEnd, sandboxEnd := net.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := r.ServeConn(ctx, runnerEnd); err != nil {
			t.Errorf("ServeConn: %v", err)
		}
	})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	wg.Go(func() {
		if err := relay.Client(ctx, sandboxEnd, b.Token(), inR, outW); err != nil {
			t.Errorf("Client: %v", err)
		}
		outW.Close()
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "h", Version: "0"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup"})
	if err != nil || res.IsError {
		t.Fatalf("CallTool: %v %+v", err, res)
	}
	cs.Close() // closes inW: stdin ends, the client half-closes, both ends finish
}
