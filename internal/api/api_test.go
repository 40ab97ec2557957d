package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/api"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/platform/platformtest"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	agenttest.MaybeRun()
	platformtest.MaybeServe()
	if len(os.Args) > 1 && os.Args[1] == local.NetSetupCommand {
		os.Exit(local.NetSetupMain()) // bwrap sandboxes (the benchmarks) re-run this binary
	}
	goleak.VerifyTestMain(m, leaktest.Global()...)
}

const token = "test-token-0123456789abcdef"

// testReplica is the service's replica id, for observers that name it.
const testReplica = "replica-test"

type env struct {
	srv *httptest.Server
	svc *runner.Service
}

type option func(*api.Config)

func newEnv(t testing.TB, opts ...option) *env {
	t.Helper()
	return newEnvIsolated(t, "none", opts...)
}

// newEnvIsolated is newEnv over a local provider with the given isolation.
func newEnvIsolated(t testing.TB, isolation string, opts ...option) *env {
	t.Helper()
	return newEnvObserved(t, isolation, nil, opts...)
}

// newEnvObserved is newEnvIsolated with turn observers (the platform mirror).
func newEnvObserved(t testing.TB, isolation string, observers []platform.Observer, opts ...option) *env {
	t.Helper()
	p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: isolation, MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit, DiskMB: local.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	log := runnertest.Logger(t)
	svc := runnertest.Service(t, runner.Config{
		Version:         "test",
		DefaultProvider: "local",
		Harnesses: map[string]agent.Spec{
			"fake":   runnertest.Fake(),
			"claude": harness.Spec("claude", agenttest.Command()),
			"ghost":  {Command: []string{"no-such-harness-binary"}},
		},
		BaseEnv:   []string{"PATH=/usr/bin:/bin"},
		KeepAlive: true,
		Observers: observers,
		ReplicaID: testReplica,
		Logger:    log,
	}, []sandbox.Provider{p}, runnertest.SQLite(t))
	cfg := api.Config{Token: token, Version: "test", MaxBodyBytes: 1 << 20, Logger: log,
		Health: func() map[string]any {
			return map[string]any{"harnesses": svc.Harnesses(), "providers": svc.Providers()}
		}}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(api.New(cfg, svc))
	t.Cleanup(srv.Close) // before the service's shutdown (cleanups run last first)
	return &env{srv: srv, svc: svc}
}

func (e *env) do(t *testing.T, method, path, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hdr["Authorization"]; !ok {
		if _, ok := hdr["X-Agenta-Runner-Token"]; !ok {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	}
	for k, v := range hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

var sessionSeq atomic.Int64

// runBody is a request in a session of its own.
func runBody(harness, prompt string, extra ...string) string {
	return sessionBody("s"+strconv.FormatInt(sessionSeq.Add(1), 10), harness, prompt, extra...)
}

func sessionBody(session, harness, prompt string, extra ...string) string {
	p, _ := json.Marshal(prompt)
	s := `{"harness":"` + harness + `","sessionId":"` + session + `","projectId":"p1","messages":[{"role":"user","content":` + string(p) + `}]`
	for _, x := range extra {
		s += "," + x
	}
	return s + "}"
}

func TestHealthIsPublic(t *testing.T) {
	e := newEnv(t)
	code, body := e.do(t, "GET", "/health", "", map[string]string{"Authorization": ""})
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var h map[string]any
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"status", "runner", "protocol", "engines", "harnesses", "version", "providers"} {
		if _, ok := h[k]; !ok {
			t.Errorf("health lacks %q: %s", k, body)
		}
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"missing", map[string]string{"Authorization": ""}, 401},
		{"wrong bearer", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"wrong length-equal", map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(token))}, 401},
		{"bearer", map[string]string{"Authorization": "Bearer " + token}, 200},
		{"bearer lowercase scheme", map[string]string{"Authorization": "bearer " + token}, 200},
		{"header", map[string]string{"X-Agenta-Runner-Token": token}, 200},
		{"header wins over bearer", map[string]string{"X-Agenta-Runner-Token": "bad", "Authorization": "Bearer " + token}, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.do(t, "GET", "/subscription-status", "", c.hdr)
			if code != c.want {
				t.Fatalf("status %d, want %d: %s", code, c.want, body)
			}
			if code == 401 && !bytes.Contains(body, []byte(`"ok":false,"error":"Unauthorized`)) {
				t.Errorf("body %s", body)
			}
		})
	}
	for _, path := range []string{"/run", "/stream", "/kill"} {
		if code, _ := e.do(t, "POST", path, "{}", map[string]string{"Authorization": ""}); code != 401 {
			t.Errorf("%s without token: %d", path, code)
		}
	}
}

func TestRoutes(t *testing.T) {
	e := newEnv(t)
	if code, body := e.do(t, "GET", "/nope", "", nil); code != 404 || !bytes.Contains(body, []byte(`"Not found"`)) {
		t.Errorf("unknown route: %d %s", code, body)
	}
	if code, body := e.do(t, "GET", "/run", "", nil); code != 405 || !bytes.Contains(body, []byte(`"ok":false`)) {
		t.Errorf("wrong method: %d %s", code, body)
	}
	if code, _ := e.do(t, "GET", "/health?probe=1", "", nil); code != 200 {
		t.Errorf("query string must not change routing: %d", code)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`
	cases := []struct {
		name, body string
		want       int
		msg        string
	}{
		{"malformed", `{"harness":`, 400, "Invalid JSON"},
		{"empty", ``, 400, "Invalid JSON"},
		{"wrong type", `{"harness":"fake","messages":"hi"}`, 400, "messages"},
		{"wrong nested type", `{"harness":"fake","messages":[{"role":"user","content":5}]}`, 400, "content"},
		{"unknown harness", runBody("nope", "hi"), 422, `unknown harness \"nope\"`},
		{"provider not enabled", runBody("fake", "hi", `"sandbox":"daytona"`), 422, "'daytona' is not enabled"},
		{"legacy fields", runBody("fake", "hi", `"secrets":{"A":"b"}`), 400, "Legacy top-level model credential fields"},
		{"no user message", `{"harness":"fake","messages":[]}`, 400, "No user message"},
		{"tail not user", `{"harness":"fake","messages":[{"role":"assistant","content":"x"}]}`, 400, "No user message"},
		{"blank user message", `{"harness":"fake","messages":[{"role":"user","content":"  "}]}`, 400, "No user message"},
		{"oversized", big, 413, "too large"},
		{"harnessFiles escape", runBody("fake", "hi", `"harnessFiles":[{"path":"../../etc/x","content":"a"}]`), 400, "harnessFiles[0].path"},
		{"harnessFiles absolute", runBody("fake", "hi", `"harnessFiles":[{"path":"/etc/x","content":"a"}]`), 400, "harnessFiles[0].path"},
		{"bad role", `{"harness":"fake","messages":[{"role":"robot","content":"x"}]}`, 400, "messages[0].role"},
		{"bad permission", runBody("fake", "hi", `"permissions":{"default":"maybe"}`), 400, "permissions.default"},
		{"model connection env mode without creds", runBody("fake", "hi", `"modelConnection":{"provider":"openai","deployment":"direct","credentialMode":"env"}`), 400, "modelConnection.credentials"},
		{"model connection reserved var", runBody("fake", "hi", `"modelConnection":{"provider":"openai","deployment":"direct","environment":{"AGENTA_RUNNER_TOKEN":"x"}}`), 400, "reserved"},
		{"opaque over http", runBody("fake", "hi", `"modelConnection":{"provider":"openai","deployment":"direct","endpoint":{"baseUrl":"http://example.com"},"credentials":[{"binding":{"kind":"environment","name":"OPENAI_API_KEY"},"value":"k","usage":"opaque_http"}]}`), 400, "https://"},
		{"network mode", runBody("fake", "hi", `"sandboxPermission":{"network":{"mode":"maybe"}}`), 400, "sandboxPermission.network.mode"},
		{"code tool", runBody("fake", "hi", `"customTools":[{"name":"x","kind":"code"}]`), 400, "Code tools"},
		{"reserved mcp name", runBody("fake", "hi", `"mcpServers":[{"name":"agenta-tools","connection":{"type":"http","url":"https://x"}}]`), 400, "reserved"},
		{"stdio mcp", runBody("fake", "hi", `"mcpServers":[{"name":"a","connection":{"type":"stdio","url":"x"}}]`), 400, `only \"http\"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, path := range []string{"/run", "/stream"} {
				// One-shot JSON keeps the error's status.
				code, body := e.do(t, "POST", path, c.body, nil)
				if code != c.want || !bytes.Contains(body, []byte(c.msg)) || !bytes.Contains(body, []byte(`"ok":false`)) {
					t.Errorf("%s JSON: status %d body %.300s; want %d containing %q", path, code, body, c.want, c.msg)
				}
				// A stream carries the refusal in its one result, as
				// Agenta's client needs; 413 keeps its status.
				code, body = e.do(t, "POST", path, c.body, map[string]string{"Accept": "application/x-ndjson"})
				if c.want == 413 {
					if code != 413 {
						t.Errorf("%s NDJSON: status %d, want 413", path, code)
					}
					continue
				}
				lines := strings.Split(strings.TrimSpace(string(body)), "\n")
				var rec wire.Record
				if code != 200 || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec.Kind != wire.RecordResult || rec.Result.OK || !strings.Contains(rec.Result.Error, strings.ReplaceAll(c.msg, `\"`, `"`)) {
					t.Errorf("%s NDJSON: status %d body %.300s; want 200 and one result {ok:false} containing %q", path, code, body, c.msg)
				}
			}
		})
	}
}

func TestRunJSON(t *testing.T) {
	e := newEnv(t)
	code, body := e.do(t, "POST", "/run", runBody("fake", "hello there", `"model":"m1"`), nil)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var res wire.Result
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Output != "echo: hello there" || res.StopReason != "end_turn" || res.SessionID == "" || res.Model != "m1" || res.Capabilities == nil {
		t.Errorf("result %+v", res)
	}
	if diff := cmp.Diff([]wire.OutMessage{{Role: "assistant", Content: "echo: hello there"}}, res.Messages); diff != "" {
		t.Error(diff)
	}
	var types []string
	for _, ev := range res.Events {
		types = append(types, ev.Type)
	}
	if diff := cmp.Diff([]string{"data", "message_start", "message_delta", "message_delta", "message_end", "done"}, types); diff != "" {
		t.Errorf("events (-want +got): %s", diff)
	}
}

func stream(t *testing.T, e *env, ctx context.Context, body string) (*http.Response, *bufio.Scanner) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/stream", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return resp, sc
}

func readAll(t *testing.T, sc *bufio.Scanner) []wire.Record {
	t.Helper()
	var recs []wire.Record
	for sc.Scan() {
		var r wire.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestStreamNDJSON(t *testing.T) {
	e := newEnv(t)
	prompt := "think plan\nsay hi there\ntool Read {\"path\":\"x\"} => data\nusage 10 5"
	resp, sc := stream(t, e, t.Context(), runBody("fake", prompt, `"permissions":{"default":"allow"}`))
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("content-type %q", ct)
	}
	recs := readAll(t, sc)
	var got []string
	for _, r := range recs {
		switch r.Kind {
		case "event":
			got = append(got, r.Event.Type)
		case "result":
			got = append(got, "RESULT")
		}
	}
	want := []string{"data", "data", "data", "thought_start", "thought_delta", "thought_end", "message_start", "message_delta", "message_delta", "message_end",
		"tool_call", "tool_result", "usage", "done", "RESULT"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	last := recs[len(recs)-1].Result
	if !last.OK || last.Output != "hi there" || len(last.Events) != 0 || last.Usage == nil || last.Usage.Total != 15 {
		t.Errorf("result %+v", last)
	}
}

func TestStreamPingsWhileSilent(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.PingInterval = 20 * time.Millisecond })
	resp, sc := stream(t, e, t.Context(), runBody("fake", "sleep 300ms\nsay done"))
	defer resp.Body.Close()
	pings := 0
	for _, r := range readAll(t, sc) {
		if r.Kind == "ping" {
			pings++
		}
	}
	if pings == 0 {
		t.Error("no ping records during a silent turn")
	}
}

// pidOf starts a turn that reports the harness pid and then sleeps.
func pidOf(t *testing.T, sc *bufio.Scanner) int {
	t.Helper()
	var text string
	for sc.Scan() {
		var r wire.Record
		_ = json.Unmarshal(sc.Bytes(), &r)
		if r.Kind == "event" && r.Event.Type == "message_delta" {
			text += r.Event.Delta
			if strings.Contains(text, "\n") {
				pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(text, "pid ")))
				if err != nil {
					t.Fatalf("pid line %q", text)
				}
				return pid
			}
		}
	}
	t.Fatal("stream ended before the pid")
	return 0
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("harness pid %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKillCancelsTurn(t *testing.T) {
	e := newEnv(t)
	resp, sc := stream(t, e, t.Context(), sessionBody("s1", "fake", "pid\nsleep 1h"))
	defer resp.Body.Close()
	pid := pidOf(t, sc)
	if code, body := e.do(t, "POST", "/kill", `{"sessionId":"s1","projectId":"other"}`, nil); code != 200 || !bytes.Contains(body, []byte(`"killed":0`)) {
		t.Fatalf("kill of another project's session: %d %s", code, body)
	}
	if code, body := e.do(t, "POST", "/kill", `{"sessionId":"s1"}`, nil); code != 400 {
		t.Fatalf("kill without project: %d %s", code, body)
	}
	code, body := e.do(t, "POST", "/kill", `{"sessionId":"s1","projectId":"p1"}`, nil)
	if code != 200 || !bytes.Contains(body, []byte(`"killed":1`)) {
		t.Fatalf("kill: %d %s", code, body)
	}
	recs := readAll(t, sc)
	last := recs[len(recs)-1]
	if last.Kind != "result" || last.Result.OK {
		t.Fatalf("last record %+v", last)
	}
	if !strings.Contains(last.Result.Error, "/kill") {
		t.Errorf("error %q", last.Result.Error)
	}
	waitGone(t, pid)
	if e.svc.InFlight() != 0 {
		t.Errorf("in flight after kill: %d", e.svc.InFlight())
	}
}

func TestClientDisconnectCancelsTurn(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	resp, sc := stream(t, e, ctx, `{"harness":"fake","messages":[{"role":"user","content":"pid\nsleep 1h"}]}`)
	pid := pidOf(t, sc)
	cancel()
	resp.Body.Close()
	waitGone(t, pid)
	deadline := time.Now().Add(10 * time.Second)
	for e.svc.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("turn still in flight after disconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHarnessCrash(t *testing.T) {
	e := newEnv(t)
	resp, sc := stream(t, e, t.Context(), runBody("fake", "say partial\ncrash 9"))
	recs := readAll(t, sc)
	resp.Body.Close()
	last := recs[len(recs)-1]
	if last.Kind != "result" || last.Result.OK || !strings.Contains(last.Result.Error, "crashing on purpose") || !strings.Contains(last.Result.Error, "code 9") {
		t.Fatalf("last record %+v", last.Result)
	}
	results := 0
	for _, r := range recs {
		if r.Kind == "result" {
			results++
		}
	}
	if results != 1 {
		t.Errorf("%d result records", results)
	}
	// The server keeps serving.
	code, body := e.do(t, "POST", "/run", runBody("fake", "still here"), nil)
	if code != 200 || !bytes.Contains(body, []byte("echo: still here")) {
		t.Fatalf("after crash: %d %s", code, body)
	}
	// One-shot mode reports the failure as 500 with the result body.
	code, body = e.do(t, "POST", "/run", runBody("fake", "crash 4"), nil)
	if code != 500 || !bytes.Contains(body, []byte(`"ok":false`)) {
		t.Fatalf("one-shot crash: %d %s", code, body)
	}
}

func TestMissingHarnessCommand(t *testing.T) {
	e := newEnv(t)
	code, body := e.do(t, "POST", "/run", runBody("ghost", "hi"), nil)
	if code != 422 || !bytes.Contains(body, []byte("no-such-harness-binary")) || !bytes.Contains(body, []byte("AGENTA_RUNNER_HARNESS_GHOST")) {
		t.Fatalf("%d %s", code, body)
	}
}

func TestInstructionsAndHarnessFiles(t *testing.T) {
	e := newEnv(t)
	prompt := "read CLAUDE.md\nread .claude/settings.json"
	code, body := e.do(t, "POST", "/run", runBody("claude", prompt, `"agentsMd":"be nice"`, `"harnessFiles":[{"path":".claude/settings.json","content":"{}"}]`), nil)
	if code != 200 || !bytes.Contains(body, []byte("read ok: be nice")) || !bytes.Contains(body, []byte("read ok: {}")) {
		t.Fatalf("%d %s", code, body)
	}
}

func TestHarnessEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("AGENTA_RUNNER_TOKEN", token)
	t.Setenv("DAYTONA_API_KEY", "secret-daytona")
	e := newEnv(t)
	mc := `"modelConnection":{"provider":"openai","deployment":"direct","endpoint":{"baseUrl":"https://api.example.com"},"environment":{"OPENAI_BASE_URL":"https://api.example.com"},"credentials":[{"binding":{"kind":"environment","name":"OPENAI_API_KEY"},"value":"sk-test","usage":"opaque_http"}]}`
	code, body := e.do(t, "POST", "/run", runBody("fake", "env", mc), nil)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var res wire.Result
	_ = json.Unmarshal(body, &res)
	for _, want := range []string{"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL=https://api.example.com", "PATH=/usr/bin:/bin", "HOME="} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("env lacks %q", want)
		}
	}
	for _, bad := range []string{token, "secret-daytona", "AGENTA_RUNNER"} {
		if strings.Contains(res.Output, bad) {
			t.Errorf("harness env leaks %q", bad)
		}
	}
}

func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.ConcurrencyLimit = 1 })
	resp, sc := stream(t, e, t.Context(), sessionBody("s1", "fake", "pid\nsleep 1h"))
	defer resp.Body.Close()
	pidOf(t, sc)
	code, body := e.do(t, "POST", "/run", runBody("fake", "hi"), nil)
	if code != 429 || !bytes.Contains(body, []byte("at capacity")) {
		t.Fatalf("%d %s", code, body)
	}
	e.do(t, "POST", "/kill", `{"sessionId":"s1","projectId":"p1"}`, nil)
}

func TestPermissionPolicy(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ def, want string }{{"allow", "selected:yes-once"}, {"deny", "selected:no"}} {
		code, body := e.do(t, "POST", "/run", runBody("fake", "permission rm", `"permissions":{"default":"`+c.def+`"}`), nil)
		if code != 200 || !bytes.Contains(body, []byte(c.want)) {
			t.Errorf("default %s: %d %s", c.def, code, body)
		}
		if c.def == "deny" && !bytes.Contains(body, []byte(`"denied":true`)) {
			t.Errorf("deny did not emit a denied tool_result: %s", body)
		}
	}
}

func TestHistoryReplayedOnColdTurn(t *testing.T) {
	e := newEnv(t)
	body := `{"harness":"fake","messages":[{"role":"user","content":"my name is Ada"},{"role":"assistant","content":"hello Ada"},{"role":"user","content":"what is my name?"}]}`
	code, out := e.do(t, "POST", "/run", body, nil)
	if code != 200 || !bytes.Contains(out, []byte("user: my name is Ada")) || !bytes.Contains(out, []byte("The user now says:\\nwhat is my name?")) {
		t.Fatalf("%d %s", code, out)
	}
}

// TestResumeTheStreamAfterADisconnect: a session's turn outlives its
// caller; the caller reconnects to the session log from its last sequence
// number, follows the live turn, and loses nothing.
func TestResumeTheStreamAfterADisconnect(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	resp, sc := stream(t, e, ctx, sessionBody("follow", "fake", "say first\nsleep 400ms\nsay second"))
	var last int64
	for sc.Scan() {
		var r wire.Record
		_ = json.Unmarshal(sc.Bytes(), &r)
		if r.Seq > 0 {
			last = r.Seq
		}
		if r.Event != nil && r.Event.Type == "message_delta" {
			break // the caller goes away mid-turn
		}
	}
	cancel()
	resp.Body.Close()

	fctx, fcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer fcancel()
	req, _ := http.NewRequestWithContext(fctx, "GET", e.srv.URL+"/v1/sessions/follow/events?follow=1&after="+strconv.FormatInt(last, 10), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	fresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer fresp.Body.Close()
	fsc := bufio.NewScanner(fresp.Body)
	var seqs []int64
	text := ""
	for fsc.Scan() {
		var r wire.Record
		if err := json.Unmarshal(fsc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "ping" {
			continue
		}
		seqs = append(seqs, r.Seq)
		if r.Event.Type == "message_delta" {
			text += r.Event.Delta
		}
		if r.Event.Type == "done" {
			break
		}
	}
	if len(seqs) == 0 || seqs[0] != last+1 {
		t.Fatalf("resumed at %v, want %d first", seqs, last+1)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("gap in the resumed log: %v", seqs)
		}
	}
	if !strings.Contains(text, "second") {
		t.Fatalf("the rest of the turn did not arrive: %q", text)
	}
	// The session's ledger shows the turn completed although its caller left.
	code, body := e.do(t, "GET", "/v1/sessions/follow", "", nil)
	if code != 200 || !bytes.Contains(body, []byte(`"status":"completed"`)) {
		t.Fatalf("%d %s", code, body)
	}
}

func TestV1Errors(t *testing.T) {
	e := newEnv(t)
	e.do(t, "POST", "/run", sessionBody("known", "fake", "hi"), nil)
	cases := []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/v1/sessions/nope", "", 404},
		{"DELETE", "/v1/sessions/nope", "", 404},
		{"GET", "/v1/sessions/nope/events", "", 404},
		{"GET", "/v1/sessions/known/events?after=abc", "", 400},
		{"GET", "/v1/sessions?limit=0", "", 400},
		{"POST", "/v1/sessions/known/interactions/int_x", `{"approved":true}`, 404},
		{"POST", "/v1/sessions/known/interactions/int_x", `{"approved":"yes"}`, 400},
		{"POST", "/v1/sessions/known/interactions/int_x", `not json`, 400},
		{"PUT", "/v1/sessions/known", "", 405},
		{"GET", "/v1/sessions/known", "", 200},
	}
	for _, c := range cases {
		code, body := e.do(t, c.method, c.path, c.body, nil)
		if code != c.want || (code != 200 && !bytes.Contains(body, []byte(`"ok":false`))) {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
		}
	}
	if code, _ := e.do(t, "GET", "/v1/sessions", "", map[string]string{"Authorization": ""}); code != 401 {
		t.Errorf("/v1 without a token: %d", code)
	}
}
