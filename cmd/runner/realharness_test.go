package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/modeltest"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

// realHarnesses are the harnesses the real-harness tests and benchmarks
// run: claude, pi_core and gemini, or the comma list in
// RUNNER_TEST_HARNESSES (codex is ~460 MB, so it runs only when listed).
// They skip unless RUNNER_TEST_HARNESS_DIR names a dir filled by
// `runner harness install`.
// realTurnBound bounds one real-harness test: generous, as node's start
// on a loaded 2-core machine takes minutes; it is a bound, not a
// measurement.
const realTurnBound = 12 * time.Minute

func realHarnesses(tb testing.TB) (string, []string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("real harnesses: skipped under -short")
	}
	dir := os.Getenv("RUNNER_TEST_HARNESS_DIR")
	if dir == "" {
		tb.Skip("RUNNER_TEST_HARNESS_DIR is not set: run `runner harness install claude pi_core gemini` with AGENTA_RUNNER_HARNESS_DIR=<dir> and set RUNNER_TEST_HARNESS_DIR=<dir>")
	}
	names := []string{"claude", "pi_core", "gemini"}
	if s := os.Getenv("RUNNER_TEST_HARNESSES"); s != "" {
		names = strings.Split(s, ",")
	}
	return dir, names
}

// realCase is how one harness is driven: its model connection against
// the fake server, and what it does.
type realCase struct {
	model      string
	conn       func(srv *modeltest.Server) map[string]any
	harnessMod string // harnessMode (Codex)
	asks       bool   // sends session/request_permission under "ask"
	load       string // the agent-session mode of a cold turn with history
}

func credential(name, value string) []any {
	return []any{map[string]any{"binding": map[string]any{"kind": "environment", "name": name}, "value": value, "usage": "opaque_http"}}
}

var realCases = map[string]realCase{
	"claude": {
		model: "claude-fake-1", asks: true, load: "load",
		conn: func(s *modeltest.Server) map[string]any {
			return map[string]any{"provider": "anthropic", "deployment": "custom", "endpoint": map[string]any{"baseUrl": s.URL},
				"credentials": credential("ANTHROPIC_API_KEY", "fake-key")}
		},
	},
	"pi_core": {
		model: "fake-model", load: "load",
		conn: func(s *modeltest.Server) map[string]any {
			// A custom OpenAI endpoint: Pi calls Chat Completions.
			return map[string]any{"provider": "openai", "deployment": "custom", "endpoint": map[string]any{"baseUrl": s.OpenAIBaseURL()},
				"credentials": credential("OPENAI_API_KEY", "fake-key")}
		},
	},
	"gemini": {
		// gemini-cli 0.61's session/load loses history: the runner replays.
		model: "gemini-2.5-flash", asks: true, load: "replay",
		conn: func(s *modeltest.Server) map[string]any {
			return map[string]any{"provider": "gemini", "deployment": "custom", "endpoint": map[string]any{"baseUrl": s.URL},
				"credentials": credential("GEMINI_API_KEY", "fake-key")}
		},
	},
	"codex": {
		// A slug codex knows: an unknown one adds a warning to the text.
		// read-only: codex's own sandbox cannot start in every container;
		// the fake's escalated exec_command asks, then runs outside it.
		model: "gpt-5.5", harnessMod: "read-only", asks: true, load: "load",
		conn: func(s *modeltest.Server) map[string]any {
			return map[string]any{"provider": "openai", "deployment": "custom", "endpoint": map[string]any{"baseUrl": s.OpenAIBaseURL()},
				"credentials": credential("OPENAI_API_KEY", "fake-key")}
		},
	},
}

func init() {
	realCases["pi_agenta"] = realCases["pi_core"]
	oc := realCases["pi_core"]
	oc.model, oc.load, oc.asks = "fake-model", "load", true
	realCases["opencode"] = oc
}

// realScript is the fake model's script: "fail" in the prompt is a 400,
// the rest is modeltest.Default on the newest user text (of a replayed
// conversation, the part after the transcript).
func realScript(r modeltest.Request) modeltest.Reply {
	if i := strings.LastIndex(r.Text, "The user now says:\n"); i >= 0 {
		r.Text = r.Text[i+len("The user now says:\n"):]
	}
	if strings.Contains(r.Text, "fail") {
		return modeltest.Reply{Err: &modeltest.Error{Status: 400, Message: "fake model error: bad request"}}
	}
	return modeltest.Default(r)
}

// TestRealHarnessesServe drives each installed real harness through
// `runner serve` over HTTP against a fake model: a text turn, a tool turn
// on the warm harness, a cold turn with history after a runner restart,
// an approval (ask → paused → approve → completed) where the harness asks,
// and a model error that must come back as ok:false with the harness's
// message. The harnesses run one after another: a first launch after an
// install is slow, and CI has two cores.
func TestRealHarnessesServe(t *testing.T) {
	dir, names := realHarnesses(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, ok := realCases[name]
			if !ok {
				t.Fatalf("no test case for harness %q", name)
			}
			ctx, cancel := context.WithTimeout(t.Context(), realTurnBound)
			defer cancel()
			testRealHarness(t, ctx, dir, name, c)
		})
	}
}

func testRealHarness(t *testing.T, ctx context.Context, dir, name string, c realCase) {
	srv := modeltest.New(t, modeltest.WithScript(realScript))
	data := t.TempDir()
	rs := startRealServe(t, ctx, dir, data, modelAllow(srv))
	req := func(session, perm string, msgs ...any) map[string]any {
		r := map[string]any{"harness": name, "sessionId": session, "model": c.model, "modelConnection": c.conn(srv),
			"permissions": map[string]any{"default": perm}, "messages": msgs}
		if c.harnessMod != "" {
			r["harnessMode"] = c.harnessMod
		}
		return r
	}
	user := func(text string) any { return map[string]any{"role": "user", "content": text} }
	assistant := func(text string) any { return map[string]any{"role": "assistant", "content": text} }

	// 1. Text turn: events in order, the fake model's text.
	tr := rs.stream(t, ctx, req("s1", "allow", user("say hello")))
	tr.wantOK(t, "PONG say hello")
	first := tr.session(t)
	if first["mode"] != "new" {
		t.Errorf("text turn: agent-session %v, want mode new", first)
	}
	tr.checkOrder(t)

	// 2. Tool turn on the warm harness: same process, same session.
	tr = rs.stream(t, ctx, req("s1", "allow", user("say hello"), assistant("PONG say hello"), user("use the tool now")))
	tr.wantOK(t, "DONE tool ran")
	warm := tr.session(t)
	if warm["mode"] != "warm" || warm["agentSessionId"] != first["agentSessionId"] {
		t.Errorf("tool turn: agent-session %v, want mode warm and agentSessionId %v", warm, first["agentSessionId"])
	}
	if !tr.has(wire.EventToolCall) || !tr.has(wire.EventToolResult) {
		t.Errorf("tool turn: no tool_call or tool_result event: %v", tr.types())
	}
	if got := findFiles(t, data, "out.txt"); !oneInWorkspaceAndStore(got, data, "s1") {
		t.Errorf("out.txt in the data dir: %v, want one in the session's workspace and its durable copy", got)
	} else if b, _ := os.ReadFile(got[0]); string(b) != "hi\n" {
		t.Errorf("%s: %q", got[0], b)
	}
	tr.checkOrder(t)

	// 3. Cold turn after the warm harness is gone (a new runner on the
	// same data dir), with the whole history: the model sees turn 1.
	rs.stop(t)
	rs = startRealServe(t, ctx, dir, data, modelAllow(srv))
	before := len(srv.Calls())
	tr = rs.stream(t, ctx, req("s1", "allow", user("say hello"), assistant("PONG say hello"), user("use the tool now"), assistant("DONE tool ran"), user("say again")))
	tr.wantOK(t, "PONG say again")
	cold := tr.session(t)
	if cold["mode"] != c.load {
		t.Errorf("cold turn: agent-session %v, want mode %s", cold, c.load)
	}
	if calls := srv.Calls()[before:]; len(calls) == 0 || !strings.Contains(string(calls[len(calls)-1].Raw), "say hello") {
		t.Errorf("cold turn: the model's request does not carry the first turn's text")
	}

	// 4. Approval: ask pauses on the shell call; the next /run approves.
	if c.asks {
		msgs := []any{user("use the tool now")}
		tr = rs.stream(t, ctx, req("s2", "ask", msgs...))
		if !tr.res.OK || tr.res.StopReason != "paused" {
			t.Fatalf("approval turn: ok %v stop %q error %q; events %v", tr.res.OK, tr.res.StopReason, tr.res.Error, tr.types())
		}
		ir, ok := tr.find(wire.EventInteractionReq)
		if !ok {
			t.Fatalf("approval turn: no interaction_request: %v", tr.types())
		}
		var p struct {
			ToolCallID string `json:"toolCallId"`
		}
		_ = json.Unmarshal(ir.Payload, &p)
		approved, _ := json.Marshal(map[string]bool{"approved": true})
		msgs = append(msgs, map[string]any{"role": "user", "content": []any{map[string]any{
			"type": "tool_result", "toolCallId": p.ToolCallID, "output": json.RawMessage(approved)}}})
		tr = rs.stream(t, ctx, req("s2", "ask", msgs...))
		tr.wantOK(t, "DONE tool ran")
		if tr.res.StopReason != "end_turn" {
			t.Errorf("approved turn: stop %q", tr.res.StopReason)
		}
	}

	// 5. deny: the shell never runs (the harness asks, the runner
	// refuses). Pi has no permission system.
	if c.asks {
		before := len(findFiles(t, data, "out.txt"))
		tr = rs.stream(t, ctx, req("s4", "deny", user("use the tool now")))
		if !tr.res.OK {
			t.Errorf("denied turn: ok false, error %q", tr.res.Error)
		}
		if got := findFiles(t, data, "out.txt"); len(got) != before {
			t.Errorf("denied turn wrote out.txt: %v; events %v", got, tr.types())
		}
	}

	// 6. A model error reaches the caller with the harness's message.
	tr = rs.stream(t, ctx, req("s3", "allow", user("now fail please")))
	t.Logf("failing turn: ok %v error %q output %q", tr.res.OK, tr.res.Error, tr.res.Output)
	if tr.res.OK || !strings.Contains(tr.res.Error, "fake model error: bad request") {
		t.Errorf("failing turn: ok %v error %q, want ok:false with the model's message", tr.res.OK, tr.res.Error)
	}
	if t.Failed() {
		t.Logf("runner stderr:\n%s", rs.stderr.String())
	}
}

// runningServe is a `runner serve` running in-process.
type runningServe struct {
	base   string
	cancel context.CancelFunc
	done   chan int
	stderr *runnertest.SyncBuffer
}

func startRealServe(t testing.TB, ctx context.Context, harnessDir, data string, extra ...string) *runningServe {
	t.Helper()
	ln, base := runnertest.Listen(t)
	env := append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"AGENTA_RUNNER_DATA_DIR=" + data,
		"AGENTA_RUNNER_HARNESS_DIR=" + harnessDir,
		"AGENTA_RUNNER_LOCAL_ISOLATION=none",
		"AGENTA_RUNNER_LOG_LEVEL=warn",
		"AGENTA_RUNNER_TOKEN=" + testToken,
		// No wall-clock run limits: on a loaded machine a real harness
		// (node) may take minutes to say anything, and these tests are
		// about what it says; the test's context bounds the wait.
		"AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS=0",
		"AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS=0",
	}, extra...)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rs := &runningServe{base: base, cancel: cancel, done: make(chan int, 1), stderr: &runnertest.SyncBuffer{}}
	go func() { rs.done <- run(withListener(sctx, ln), []string{"serve"}, env, nil, io.Discard, rs.stderr) }()
	t.Cleanup(func() { rs.stop(t) })
	waitReady(t, ctx, rs)
	return rs
}

// modelAllow opens the fake model on the host's loopback to the runner:
// the operator's setting, as a deployment with a local model server sets it.
func modelAllow(srv *modeltest.Server) string {
	return "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW=" + strings.TrimPrefix(srv.URL, "http://")
}

func listenPort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitReady polls /health until the runner answers, it exits, or ctx ends.
func waitReady(tb testing.TB, ctx context.Context, rs *runningServe) {
	tb.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rs.base+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case code := <-rs.done:
			rs.cancel = nil
			tb.Fatalf("runner serve exited %d before it was ready:\n%s", code, rs.stderr.String())
		case <-ctx.Done():
			tb.Fatalf("runner serve not ready: %v\n%s", ctx.Err(), rs.stderr.String())
		case <-tick.C:
		}
	}
}

// stop shuts the runner down as SIGTERM does and waits for it.
func (rs *runningServe) stop(t testing.TB) {
	t.Helper()
	if rs.cancel == nil {
		return
	}
	rs.cancel()
	rs.cancel = nil
	select {
	case code := <-rs.done:
		if code != 0 {
			t.Errorf("runner serve exited %d:\n%s", code, rs.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Errorf("runner serve did not stop within a minute")
	}
}

// turnRecords is one /stream response.
type turnRecords struct {
	events []wire.Record
	res    wire.Result
}

func (rs *runningServe) stream(t testing.TB, ctx context.Context, body map[string]any) turnRecords {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rs.base+"/stream", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /stream: %v\nrunner stderr:\n%s", err, rs.stderr.String())
	}
	defer resp.Body.Close()
	var tr turnRecords
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var r wire.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("NDJSON line %q: %v", sc.Text(), err)
		}
		switch {
		case r.Kind == wire.RecordResult && r.Result != nil:
			tr.res = *r.Result
			return tr
		case r.Kind == wire.RecordEvent && r.Event != nil:
			tr.events = append(tr.events, r)
		}
	}
	t.Fatalf("stream ended without a result (%v); events %v\nrunner stderr:\n%s", sc.Err(), tr.types(), rs.stderr.String())
	return tr
}

func (tr turnRecords) wantOK(t testing.TB, output string) {
	t.Helper()
	if !tr.res.OK || !strings.Contains(tr.res.Output, output) {
		t.Fatalf("turn: ok %v output %q error %q, want ok and %q; events %v", tr.res.OK, tr.res.Output, tr.res.Error, output, tr.types())
	}
}

func (tr turnRecords) types() []string {
	var out []string
	for _, r := range tr.events {
		s := r.Event.Type
		if r.Event.Name != "" {
			s += ":" + r.Event.Name
		}
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

func (tr turnRecords) has(typ string) bool {
	_, ok := tr.find(typ)
	return ok
}

func (tr turnRecords) find(typ string) (wire.Event, bool) {
	for _, r := range tr.events {
		if r.Event.Type == typ {
			return *r.Event, true
		}
	}
	return wire.Event{}, false
}

// session returns the agent-session event's data.
func (tr turnRecords) session(t *testing.T) map[string]any {
	t.Helper()
	for _, r := range tr.events {
		if r.Event.Type == wire.EventData && r.Event.Name == "agent-session" {
			var m map[string]any
			b, _ := json.Marshal(r.Event.Data)
			_ = json.Unmarshal(b, &m)
			return m
		}
	}
	t.Fatalf("no agent-session event: %v", tr.types())
	return nil
}

// checkOrder checks the stream's shape: logged events numbered in
// increasing order, text between message_start and message_end, and done
// last.
func (tr turnRecords) checkOrder(t *testing.T) {
	t.Helper()
	var last int64
	open := map[string]bool{}
	for i, r := range tr.events {
		if r.Seq != 0 {
			if r.Seq <= last {
				t.Errorf("event %d (%s): seq %d after %d", i, r.Event.Type, r.Seq, last)
			}
			last = r.Seq
		}
		switch r.Event.Type {
		case wire.EventMessageStart:
			open[r.Event.ID] = true
		case wire.EventMessageDelta:
			if !open[r.Event.ID] {
				t.Errorf("event %d: message_delta of %q outside its message", i, r.Event.ID)
			}
		case wire.EventMessageEnd:
			delete(open, r.Event.ID)
		}
	}
	if n := len(tr.events); n == 0 || tr.events[n-1].Event.Type != wire.EventDone {
		t.Errorf("the last event is not done: %v", tr.types())
	}
	if !slices.ContainsFunc(tr.events, func(r wire.Record) bool { return r.Event.Type == wire.EventMessageDelta }) {
		t.Errorf("no message_delta: %v", tr.types())
	}
}

func findFiles(t *testing.T, root, name string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// oneInWorkspaceAndStore: the harness wrote the file once, in the
// session's sandbox workspace, and the turn's final checkpoint copied it
// into the default durable store (<data>/workspaces/sessions/<project>/<session>).
func oneInWorkspaceAndStore(found []string, data, session string) bool {
	stored := filepath.Join(data, "workspaces", "sessions", "default", session, "out.txt")
	var inStore, elsewhere int
	for _, p := range found {
		if p == stored {
			inStore++
		} else if strings.HasPrefix(p, filepath.Join(data, "sandboxes")+string(filepath.Separator)) {
			elsewhere++
		} else {
			return false
		}
	}
	return inStore == 1 && elsewhere == 1
}

// TestRealHarnessesIsolated runs a tool turn of each real harness inside
// the bubblewrap sandbox (AGENTA_RUNNER_LOCAL_ISOLATION=bwrap), then a
// text turn under a network allowlist that admits only the fake model.
// The harness dir is the default one, in the data dir that bubblewrap
// hides (here symlinks to the installed harnesses).
func TestRealHarnessesIsolated(t *testing.T) {
	dir, names := realHarnesses(t)
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed: apt-get install bubblewrap")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, ok := realCases[name]
			if !ok {
				t.Fatalf("no test case for harness %q", name)
			}
			ctx, cancel := context.WithTimeout(t.Context(), realTurnBound)
			defer cancel()
			srv := modeltest.New(t, modeltest.WithScript(realScript))
			data := t.TempDir()
			hdir := filepath.Join(data, "harnesses")
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if err := os.MkdirAll(hdir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(hdir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
			rs := startRealServe(t, ctx, hdir, data, "AGENTA_RUNNER_LOCAL_ISOLATION=bwrap", modelAllow(srv))
			body := map[string]any{"harness": name, "sessionId": "iso", "model": c.model, "modelConnection": c.conn(srv),
				"permissions": map[string]any{"default": "allow"}, "messages": []any{map[string]any{"role": "user", "content": "use the tool now"}}}
			if c.harnessMod != "" {
				body["harnessMode"] = c.harnessMod
			}
			tr := rs.stream(t, ctx, body)
			tr.wantOK(t, "DONE tool ran")
			if got := findFiles(t, data, "out.txt"); !oneInWorkspaceAndStore(got, data, "iso") {
				t.Errorf("out.txt in the data dir: %v, want one in the session's workspace and its durable copy", got)
			}
			// The error still comes out (Pi's is read from its session
			// file by a process inside the sandbox).
			body["sessionId"] = "iso-fail"
			body["messages"] = []any{map[string]any{"role": "user", "content": "now fail please"}}
			tr = rs.stream(t, ctx, body)
			if tr.res.OK || !strings.Contains(tr.res.Error, "fake model error: bad request") {
				t.Errorf("failing turn: ok %v error %q, want ok:false with the model's message", tr.res.OK, tr.res.Error)
			}

			t.Run("allowlist", func(t *testing.T) {
				body["sessionId"] = "iso-allowlist"
				body["messages"] = []any{map[string]any{"role": "user", "content": "say hello"}}
				body["sandboxPermission"] = map[string]any{"network": map[string]any{"mode": "allowlist", "allowlist": []string{srv.Addr}}}
				tr := rs.stream(t, ctx, body)
				if !tr.res.OK && strings.Contains(tr.res.Error, "proxy bridge") {
					t.Skipf("network allowlist: %s", tr.res.Error)
				}
				tr.wantOK(t, "PONG say hello")
			})
		})
	}
}
