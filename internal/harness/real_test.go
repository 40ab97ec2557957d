package harness_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/modeltest"
	"github.com/agentrunner/runner/internal/runnertest"
)

// TestRealHarnesses launches each installed harness with the configuration
// Configure generates, pointed at a modeltest server, and drives it over
// raw ACP: a text turn must answer "PONG …" and a tool turn must create
// out.txt in the session's cwd, and a model error must reach the client.
// It runs when RUNNER_TEST_HARNESS_DIR names a harness dir filled by
// `runner harness install` (or Install); the harnesses are claude, pi_core
// and gemini, or the comma list in RUNNER_TEST_HARNESSES (codex is ~460 MB
// and opencode ~370 MB, so they run only when listed).
func TestRealHarnesses(t *testing.T) {
	if testing.Short() {
		t.Skip("real harnesses: skipped under -short")
	}
	dir := os.Getenv("RUNNER_TEST_HARNESS_DIR")
	if dir == "" {
		t.Skip("RUNNER_TEST_HARNESS_DIR is not set: install harnesses with `runner harness install claude pi_core gemini` into a dir and point it there")
	}
	names := []string{"claude", "pi_core", "gemini"}
	if s := os.Getenv("RUNNER_TEST_HARNESSES"); s != "" {
		names = strings.Split(s, ",")
	}
	conns := map[string]func(*modeltest.Server) harness.ModelConn{
		"claude": func(s *modeltest.Server) harness.ModelConn {
			return harness.ModelConn{API: harness.Anthropic, BaseURL: s.URL, Key: "fake-key", Model: "claude-fake-1"}
		},
		"codex": func(s *modeltest.Server) harness.ModelConn {
			// A slug codex knows: an unknown one adds a warning to the text.
			return harness.ModelConn{Provider: "fake", API: harness.OpenAIResponses, BaseURL: s.OpenAIBaseURL(), KeyEnv: "FAKE_API_KEY", Key: "fake", Model: "gpt-5.5"}
		},
		"pi_core": func(s *modeltest.Server) harness.ModelConn {
			return harness.ModelConn{Provider: "fake", API: harness.OpenAIChat, BaseURL: s.OpenAIBaseURL(), KeyEnv: "FAKE_API_KEY", Key: "fake", Model: "fake-model"}
		},
		"gemini": func(s *modeltest.Server) harness.ModelConn {
			return harness.ModelConn{API: harness.Gemini, BaseURL: s.URL, Key: "fake", Model: "gemini-2.5-flash"}
		},
	}
	conns["pi_agenta"] = conns["pi_core"]
	conns["opencode"] = conns["pi_core"]
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn, ok := conns[name]
			if !ok {
				t.Fatalf("no model connection for harness %q", name)
			}
			runReal(t, dir, name, conn)
		})
	}
}

func runReal(t *testing.T, dir, name string, conn func(*modeltest.Server) harness.ModelConn) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	srv := modeltest.New(t, modeltest.WithScript(func(r modeltest.Request) modeltest.Reply {
		if strings.Contains(r.Text, "fail") {
			return modeltest.Reply{Err: &modeltest.Error{Status: 400, Message: "fake model error: bad request"}}
		}
		return modeltest.Default(r)
	}))
	argv, launchEnv, err := harness.Resolve(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	home, cwd := t.TempDir(), t.TempDir()
	cfg, err := harness.Configure(name, conn(srv), harness.Dirs{Home: home, Root: os.Geteuid() == 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Write(home); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range launchEnv {
		env = append(env, k+"="+v)
	}
	if name == "codex" {
		// Codex's own sandbox cannot start in every container; in
		// read-only mode the fake's escalated exec_command asks for
		// permission and then runs outside it.
		env = append(env, "INITIAL_AGENT_MODE=read-only")
	}
	env = cfg.Environ(env)

	start := time.Now()
	c := startACP(t, ctx, argv, env, cwd)
	var init struct {
		AgentInfo map[string]any `json:"agentInfo"`
	}
	c.call(ctx, "initialize", map[string]any{
		"protocolVersion":    1,
		"clientCapabilities": map[string]any{"fs": map[string]any{"readTextFile": false, "writeTextFile": false}, "terminal": false},
		"clientInfo":         map[string]any{"name": "runner-test", "version": "0"},
	}, &init)
	t.Logf("initialize %v: agentInfo %v", time.Since(start).Round(time.Millisecond), init.AgentInfo)

	start = time.Now()
	var sess struct {
		SessionID string `json:"sessionId"`
		Modes     struct {
			CurrentModeID string `json:"currentModeId"`
		} `json:"modes"`
	}
	c.call(ctx, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}, &sess)
	t.Logf("session/new %v: id %s, mode %q", time.Since(start).Round(time.Millisecond), sess.SessionID, sess.Modes.CurrentModeID)
	if name == "claude" {
		// claude-agent-acp starts in "auto", which runs Bash unasked and
		// appends a billing note to the text; "default" asks.
		c.call(ctx, "session/set_mode", map[string]any{"sessionId": sess.SessionID, "modeId": "default"}, nil)
	}

	text, kinds, stop := c.prompt(ctx, sess.SessionID, "say hello")
	t.Logf("text turn: stop %s, updates %v, text %q", stop, kinds, text)
	if stop != "end_turn" || !strings.Contains(text, "PONG say hello") {
		t.Errorf("text turn: stop %q, text %q; want end_turn and PONG say hello", stop, text)
	}

	text, kinds, stop = c.prompt(ctx, sess.SessionID, "use the tool now")
	t.Logf("tool turn: stop %s, updates %v, text %q, permissions %v", stop, kinds, text, c.permissions())
	if stop != "end_turn" || !strings.Contains(text, "DONE tool ran") {
		t.Errorf("tool turn: stop %q, text %q; want end_turn and DONE tool ran", stop, text)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "out.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("out.txt: %q, %v", b, err)
	}

	// A model error (400: no harness retries it for long) must reach the
	// client. Each harness reports it its own way.
	msg, errText, stop := c.promptErr(ctx, sess.SessionID, "now fail please")
	t.Logf("error turn: rpc error %q, stop %q, text %q", msg, stop, errText)
	switch name {
	case "claude", "gemini", "opencode":
		// a JSON-RPC error carrying the API's message
		if !strings.Contains(msg, "fake model error: bad request") {
			t.Errorf("error turn: rpc error %q, want the model's message", msg)
		}
	case "codex":
		// end_turn, the provider's error body as agent text
		if msg != "" || stop != "end_turn" || !strings.Contains(errText, "fake model error: bad request") {
			t.Errorf("error turn: rpc error %q, stop %q, text %q", msg, stop, errText)
		}
	case "pi_core", "pi_agenta":
		// pi-acp 0.0.24 drops the error: end_turn and no text. Only pi's
		// session file has it.
		if msg != "" || stop != "end_turn" || errText != "" {
			t.Errorf("error turn: rpc error %q, stop %q, text %q", msg, stop, errText)
		}
		if got := piLastError(t, home, sess.SessionID); !strings.Contains(got, "fake model error: bad request") {
			t.Errorf("pi session file: last errorMessage %q", got)
		}
	}

	for _, r := range srv.Requests() {
		t.Logf("model request: %s %s kind=%s aux=%q model=%q stream=%v tools=%d text=%.60q results=%.300q reply=%.60q",
			r.Method, r.Path, r.Kind, r.Aux, r.Model, r.Stream, len(r.Tools), r.Text, r.ToolResults, replyText(r.Reply))
		if r.API == "" {
			t.Errorf("request to a path the fake does not serve: %s %s", r.Method, r.Path)
		}
	}
	if t.Failed() {
		t.Logf("stderr tail:\n%s", c.stderrTail())
	}
}

func replyText(r modeltest.Reply) string {
	switch {
	case r.Err != nil:
		return fmt.Sprintf("error %d %s", r.Err.Status, r.Err.Message)
	case len(r.ToolCalls) > 0:
		return "tool " + r.ToolCalls[0].Name + " " + string(r.ToolCalls[0].Args)
	}
	return r.Text
}

// acpClient is a minimal ACP client over a harness's stdio: JSON-RPC 2.0,
// one message a line.
type acpClient struct {
	t      *testing.T
	stdin  io.WriteCloser
	stderr *runnertest.SyncBuffer

	mu      sync.Mutex
	nextID  int
	pending map[int]chan rpcMsg
	updates chan map[string]any
	perms   []string
	dead    chan struct{}
}

type rpcMsg struct {
	ID     *json.RawMessage `json:"id,omitempty"`
	Method string           `json:"method,omitempty"`
	Params json.RawMessage  `json:"params,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data,omitempty"`
	} `json:"error,omitempty"`
}

func startACP(t *testing.T, ctx context.Context, argv, env []string, cwd string) *acpClient {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c := &acpClient{t: t, stderr: &runnertest.SyncBuffer{}, pending: map[int]chan rpcMsg{}, updates: make(chan map[string]any, 1024), dead: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.stdin = stdin
	var wg sync.WaitGroup
	wg.Go(func() { c.read(stdout) })
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the whole group: codex app-server, pi, gemini's relaunch
		<-done
		wg.Wait()
	})
	go func() {
		<-ctx.Done()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}()
	return c
}

func (c *acpClient) stderrTail() string {
	s := c.stderr.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

func (c *acpClient) send(v any) {
	b, _ := json.Marshal(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Logf("write to harness: %v", err)
	}
}

func (c *acpClient) read(r io.Reader) {
	defer close(c.dead)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var m rpcMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.t.Logf("harness stdout (not JSON-RPC): %.200s", sc.Text())
			continue
		}
		switch {
		case m.Method != "" && m.ID != nil:
			c.answer(m)
		case m.Method == "session/update":
			var p struct {
				Update map[string]any `json:"update"`
			}
			_ = json.Unmarshal(m.Params, &p)
			c.updates <- p.Update
		case m.Method != "":
			// another notification: ignore
		case m.ID != nil:
			var id int
			_ = json.Unmarshal(*m.ID, &id)
			c.mu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

// answer handles a request from the agent: permission requests are
// allowed by option kind, anything else is refused.
func (c *acpClient) answer(m rpcMsg) {
	if m.Method != "session/request_permission" {
		c.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "not supported by the test client"}})
		return
	}
	var p struct {
		ToolCall struct {
			Title string `json:"title"`
			Kind  string `json:"kind"`
		} `json:"toolCall"`
		Options []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	_ = json.Unmarshal(m.Params, &p)
	var chosen string
	for _, want := range []string{"allow_once", "allow_always"} {
		for _, o := range p.Options {
			if o.Kind == want && chosen == "" {
				chosen = o.OptionID
			}
		}
	}
	var opts []string
	for _, o := range p.Options {
		opts = append(opts, o.OptionID+":"+o.Kind)
	}
	c.mu.Lock()
	c.perms = append(c.perms, fmt.Sprintf("%q (%s) %v → %s", p.ToolCall.Title, p.ToolCall.Kind, opts, chosen))
	c.mu.Unlock()
	c.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{
		"outcome": map[string]any{"outcome": "selected", "optionId": chosen},
	}})
}

func (c *acpClient) permissions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.perms)
}

// piLastError returns the errorMessage of the last assistant message in
// pi's session file for sessionID.
func piLastError(t *testing.T, home, sessionID string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(home, ".pi", "agent", "sessions", "*", "*_"+sessionID+".jsonl"))
	if len(files) != 1 {
		t.Fatalf("pi session files for %s: %v", sessionID, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e struct {
			Message struct {
				Role         string `json:"role"`
				StopReason   string `json:"stopReason"`
				ErrorMessage string `json:"errorMessage"`
			} `json:"message"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Message.Role == "assistant" {
			last = e.Message.ErrorMessage
		}
	}
	return last
}

// call sends a request and waits for its response, failing the test on
// an error response, a dead harness or ctx's end.
func (c *acpClient) call(ctx context.Context, method string, params, result any) {
	c.t.Helper()
	if msg := c.callErr(ctx, method, params, result); msg != "" {
		c.t.Fatalf("%s: %s\nstderr:\n%s", method, msg, c.stderrTail())
	}
}

// callErr is call that returns an error response's message instead of
// failing.
func (c *acpClient) callErr(ctx context.Context, method string, params, result any) string {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	ch := make(chan rpcMsg, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Sprintf("error %d %s %s", m.Error.Code, m.Error.Message, m.Error.Data)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				c.t.Fatalf("%s result: %v", method, err)
			}
		}
	case <-c.dead:
		c.t.Fatalf("%s: the harness exited\nstderr:\n%s", method, c.stderrTail())
	case <-ctx.Done():
		c.t.Fatalf("%s: %v\nstderr:\n%s", method, ctx.Err(), c.stderrTail())
	}
	return ""
}

// prompt runs one turn and returns the agent's text, the update kinds in
// order, and the stop reason.
func (c *acpClient) prompt(ctx context.Context, sessionID, text string) (string, []string, string) {
	c.t.Helper()
	msg, out, kinds, stop := c.turn(ctx, sessionID, text)
	if msg != "" {
		c.t.Fatalf("session/prompt: %s\nstderr:\n%s", msg, c.stderrTail())
	}
	return out, kinds, stop
}

// promptErr runs a turn that may fail: it returns the error response's
// message (or ""), the agent's text and the stop reason.
func (c *acpClient) promptErr(ctx context.Context, sessionID, text string) (string, string, string) {
	c.t.Helper()
	msg, out, _, stop := c.turn(ctx, sessionID, text)
	return msg, out, stop
}

func (c *acpClient) turn(ctx context.Context, sessionID, text string) (msg, out string, kinds []string, stop string) {
	c.t.Helper()
	for len(c.updates) > 0 { // updates left from before this turn
		<-c.updates
	}
	var res struct {
		StopReason string `json:"stopReason"`
	}
	msg = c.callErr(ctx, "session/prompt", map[string]any{
		"sessionId": sessionID,
		"prompt":    []any{map[string]any{"type": "text", "text": text}},
	}, &res)
	var b strings.Builder
	// Updates sent before the response are already queued; take them.
	for len(c.updates) > 0 {
		u := <-c.updates
		kind, _ := u["sessionUpdate"].(string)
		if len(kinds) == 0 || kinds[len(kinds)-1] != kind {
			kinds = append(kinds, kind)
		}
		if kind == "agent_message_chunk" {
			if content, ok := u["content"].(map[string]any); ok && content["type"] == "text" {
				b.WriteString(content["text"].(string))
			}
		}
	}
	return msg, b.String(), kinds, res.StopReason
}
