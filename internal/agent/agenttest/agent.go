package agenttest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/jsonrpc"
)

// Directives the fake agent understands, one per prompt line.
//
//	say <text>                     agent_message_chunk(s)
//	think <text>                   agent_thought_chunk
//	tool <title> <json-input> [=> <output>]   tool_call, then completed update
//	toolstart <title>              a pending tool_call that never completes
//	toolupdate <id> <title>        a tool_call_update with no prior tool_call
//	permission <title> [kind]      session/request_permission; says the outcome
//	sleep <duration>               waits; session/cancel interrupts it
//	crash <code>                   writes to stderr and exits
//	pid                            says its process id
//	read <path>                    says the file's content or the error
//	write <path> <text>            writes a file; says ok or the error
//	exec <shell command>           runs sh -c; says output and exit status
//	env                            says its environment, sorted
//	connect <host:port>            dials TCP; says ok or the error
//	connectunix <path>             dials a unix socket; says ok or the error
//	http <URLVAR> <KEYVAR> <path>  GETs $URLVAR<path> with "Bearer $KEYVAR"; says the status and body
//	     [Name:value…] [-- <body>]   adds headers; POSTs the body; $VARs in path, headers and body expanded
//	history                        says the prompts this session has seen
//	usage <in> <out>               reports token usage in the prompt result
//	update <json>                  sends a raw session/update
//	flood <n> [bytes]              n message deltas of bytes each (default 1)
//	mcp <server> <tool> <json>     calls a tool of a stdio MCP server from session/new
//	stop <reason>                  ends the turn with this stopReason
//	model                          says the session's model (session/set_model, which refuses ids starting "refuse"; "default" until set)
const Directives = "say think tool toolstart toolupdate permission sleep crash pid read write exec env connect connectunix http history images usage update flood mcp stop model"

type fakeAgent struct {
	conn  *jsonrpc.Conn
	ready chan struct{} // closed once conn is set

	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	ID      string          `json:"id"`
	Cwd     string          `json:"cwd"`
	Prompts []string        `json:"prompts"`
	MCP     []mcpServerSpec `json:"mcp"`
	Model   string          `json:"model,omitempty"`

	mu     sync.Mutex
	cancel context.CancelFunc
}

type mcpServerSpec struct {
	Name    string            `json:"name"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     []nameValue       `json:"env"`
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers []nameValue       `json:"headers"`
	Extra   map[string]string `json:"-"`
}

type nameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func (a *fakeAgent) cancelAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.sessions {
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		s.mu.Unlock()
	}
}

// storeDir is where sessions run in cwd are kept: like Claude Code's
// projects/<key>, named after the working directory (StateDir, KeyedDirs).
func storeDir(cwd string) string {
	home := os.Getenv("HOME")
	if home == "" {
		home = os.TempDir()
	}
	return filepath.Join(home, StateDir, harness.ClaudeProjectKey(cwd))
}

func (s *session) save() {
	_ = os.MkdirAll(storeDir(s.Cwd), 0o700)
	b, _ := json.Marshal(s)
	_ = os.WriteFile(filepath.Join(storeDir(s.Cwd), s.ID+".json"), b, 0o600)
}

func (a *fakeAgent) handle(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
	<-a.ready
	switch method {
	case "initialize":
		return map[string]any{
			"protocolVersion": 1,
			"agentCapabilities": map[string]any{
				"loadSession":        true,
				"promptCapabilities": map[string]any{"image": true, "embeddedContext": true},
				"mcpCapabilities":    map[string]any{"http": true},
			},
			"agentInfo":   map[string]any{"name": "fake-agent", "version": "1.0.0"},
			"authMethods": []any{},
		}, nil
	case "session/new":
		var p struct {
			Cwd        string          `json:"cwd"`
			MCPServers []mcpServerSpec `json:"mcpServers"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		if !filepath.IsAbs(p.Cwd) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "cwd must be absolute"}
		}
		var b [6]byte
		_, _ = rand.Read(b[:])
		s := &session{ID: "fake-" + hex.EncodeToString(b[:]), Cwd: p.Cwd, MCP: p.MCPServers}
		s.save()
		a.mu.Lock()
		a.sessions[s.ID] = s
		a.mu.Unlock()
		return map[string]any{"sessionId": s.ID, "modes": map[string]any{
			"currentModeId":  "default",
			"availableModes": []any{map[string]any{"id": "default", "name": "Default"}, map[string]any{"id": "plan", "name": "Plan"}},
		}, "models": map[string]any{
			"currentModelId":  "default",
			"availableModels": []any{map[string]any{"modelId": "default", "name": "Default"}},
		}}, nil
	case "session/load":
		var p struct {
			SessionID  string          `json:"sessionId"`
			Cwd        string          `json:"cwd"`
			MCPServers []mcpServerSpec `json:"mcpServers"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		if !filepath.IsAbs(p.Cwd) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "cwd must be absolute"}
		}
		b, err := os.ReadFile(filepath.Join(storeDir(p.Cwd), filepath.Base(p.SessionID)+".json"))
		if err != nil {
			return nil, &jsonrpc.Error{Code: -32002, Message: "session not found: " + p.SessionID}
		}
		s := &session{}
		if err := json.Unmarshal(b, s); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternal, Message: err.Error()}
		}
		s.MCP, s.Cwd = p.MCPServers, p.Cwd
		a.mu.Lock()
		a.sessions[s.ID] = s
		a.mu.Unlock()
		for _, pr := range s.Prompts { // replay, as ACP requires
			a.update(s.ID, map[string]any{"sessionUpdate": "user_message_chunk", "content": text(pr)})
		}
		return map[string]any{}, nil
	case "session/set_mode":
		return map[string]any{}, nil
	case "session/set_model":
		var p struct {
			SessionID string `json:"sessionId"`
			ModelID   string `json:"modelId"`
		}
		_ = json.Unmarshal(params, &p)
		s := a.session(p.SessionID)
		if s == nil || p.ModelID == "" || strings.HasPrefix(p.ModelID, "refuse") {
			// A model named refuse… is refused, for tests of a failed bind.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown session, or a model this agent refuses: " + p.ModelID}
		}
		s.mu.Lock()
		s.Model = p.ModelID
		s.mu.Unlock()
		return map[string]any{}, nil
	case "session/cancel":
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(params, &p)
		if s := a.session(p.SessionID); s != nil {
			s.mu.Lock()
			if s.cancel != nil {
				s.cancel()
			}
			s.mu.Unlock()
		}
		return nil, nil
	case "session/prompt":
		return a.prompt(params)
	}
	if notify {
		return nil, nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + method}
}

func (a *fakeAgent) session(id string) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[id]
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

func (a *fakeAgent) update(sessionID string, u any) {
	_ = a.conn.Notify("session/update", map[string]any{"sessionId": sessionID, "update": u})
}

func (a *fakeAgent) say(sessionID, s string) {
	a.update(sessionID, map[string]any{"sessionUpdate": "agent_message_chunk", "content": text(s)})
}

func (a *fakeAgent) prompt(params json.RawMessage) (any, error) {
	var p struct {
		SessionID string `json:"sessionId"`
		Prompt    []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			MimeType string `json:"mimeType"`
			Data     string `json:"data"`
		} `json:"prompt"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	s := a.session(p.SessionID)
	if s == nil {
		return nil, &jsonrpc.Error{Code: -32002, Message: "unknown session " + p.SessionID}
	}
	var prompt strings.Builder
	var images []string
	for _, b := range p.Prompt {
		switch b.Type {
		case "text":
			prompt.WriteString(b.Text)
		case "image":
			images = append(images, fmt.Sprintf("%s:%d", b.MimeType, len(b.Data)))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	defer cancel()

	r := &turn{a: a, s: s, ctx: ctx, stop: "end_turn", images: images}
	r.run(prompt.String())
	s.Prompts = append(s.Prompts, prompt.String())
	s.save()
	if ctx.Err() != nil {
		r.stop = "cancelled"
	}
	res := map[string]any{"stopReason": r.stop}
	if r.usage != nil {
		res["usage"] = r.usage
	}
	return res, nil
}

func isDirective(prompt string) bool {
	f := strings.Fields(prompt)
	return len(f) > 0 && strings.Contains(" "+Directives+" ", " "+f[0]+" ")
}

type turn struct {
	a     *fakeAgent
	s     *session
	ctx   context.Context
	stop  string
	usage map[string]any
	tools int
	// images are the prompt's image blocks, as mimeType:length.
	images []string
}

// replayMarkers end the runner's replayed transcripts; the fake agent acts
// on what follows the last one, as a model would act on the newest request.
var replayMarkers = []string{"The user now says:\n", "Re-issue it now:\n"}

func (r *turn) run(prompt string) {
	// Notes the runner adds for the model ("[runner] …" lines first) are
	// read, not acted on.
	for strings.HasPrefix(prompt, "[runner] ") {
		_, prompt, _ = strings.Cut(prompt, "\n")
		prompt = strings.TrimLeft(prompt, "\n")
	}
	original := prompt
	if strings.HasPrefix(prompt, "Conversation so far:") || strings.HasPrefix(prompt, "The user answered") {
		at, cut := -1, 0
		for _, m := range replayMarkers {
			if i := strings.LastIndex(prompt, m); i > at {
				at, cut = i, i+len(m)
			}
		}
		if at >= 0 && isDirective(prompt[cut:]) {
			r.say("[replayed] ")
			prompt = prompt[cut:]
		}
	}
	if !isDirective(prompt) {
		r.a.say(r.s.ID, "echo: ")
		r.a.say(r.s.ID, original)
		return
	}
	sc := bufio.NewScanner(strings.NewReader(prompt))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if r.ctx.Err() != nil {
			return
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		verb, arg, _ := strings.Cut(line, " ")
		r.do(verb, strings.TrimSpace(arg))
	}
}

func (r *turn) say(s string) { r.a.say(r.s.ID, s) }

func (r *turn) do(verb, arg string) {
	id := r.s.ID
	switch verb {
	case "say":
		words := strings.SplitAfter(arg, " ")
		for _, w := range words {
			r.say(w)
		}
	case "think":
		r.a.update(id, map[string]any{"sessionUpdate": "agent_thought_chunk", "content": text(arg)})
	case "tool":
		r.tools++
		callID := "call-" + strconv.Itoa(r.tools)
		title, rest, _ := strings.Cut(arg, " ")
		input, output, _ := strings.Cut(rest, "=>")
		input = strings.TrimSpace(input)
		if input == "" {
			input = "{}"
		}
		r.a.update(id, map[string]any{"sessionUpdate": "tool_call", "toolCallId": callID, "title": title, "kind": "execute", "status": "pending", "rawInput": json.RawMessage(input)})
		r.a.update(id, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": callID, "status": "completed",
			"content": []any{map[string]any{"type": "content", "content": text(strings.TrimSpace(output))}}})
	case "toolstart": // a tool call announced and never finished
		r.tools++
		r.a.update(id, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call-" + strconv.Itoa(r.tools), "title": arg, "kind": "execute", "status": "pending", "rawInput": map[string]any{}})
	case "toolupdate":
		callID, title, _ := strings.Cut(arg, " ")
		r.a.update(id, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": callID, "title": title, "status": "completed",
			"rawInput": map[string]any{"x": 1}, "content": []any{map[string]any{"type": "content", "content": text("ok")}}})
	case "permission":
		title, kind, _ := strings.Cut(arg, " ")
		if kind == "" {
			kind = "execute"
		}
		r.tools++
		callID := "call-" + strconv.Itoa(r.tools)
		r.a.update(id, map[string]any{"sessionUpdate": "tool_call", "toolCallId": callID, "title": title, "kind": kind, "status": "pending", "rawInput": map[string]any{"command": title}})
		var res struct {
			Outcome struct {
				Outcome  string `json:"outcome"`
				OptionID string `json:"optionId"`
			} `json:"outcome"`
		}
		err := r.a.conn.Call(context.Background(), "session/request_permission", map[string]any{
			"sessionId": id,
			"toolCall":  map[string]any{"toolCallId": callID, "title": title, "kind": kind, "rawInput": map[string]any{"command": title}},
			"options": []any{
				map[string]any{"optionId": "yes-once", "name": "Allow", "kind": "allow_once"},
				map[string]any{"optionId": "yes-always", "name": "Always", "kind": "allow_always"},
				map[string]any{"optionId": "no", "name": "Reject", "kind": "reject_once"},
			},
		}, &res)
		outcome := res.Outcome.Outcome
		if res.Outcome.OptionID != "" {
			outcome += ":" + res.Outcome.OptionID
		}
		if err != nil {
			outcome = "error: " + err.Error()
		}
		status := "completed"
		if res.Outcome.OptionID != "yes-once" && res.Outcome.OptionID != "yes-always" {
			status = "failed"
		}
		r.a.update(id, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": callID, "status": status,
			"content": []any{map[string]any{"type": "content", "content": text("permission " + outcome)}}})
		r.say("permission " + outcome + "\n")
		if res.Outcome.Outcome == "cancelled" {
			r.stop = "cancelled"
		}
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil {
			r.say("bad duration: " + err.Error())
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.ctx.Done():
		}
	case "crash":
		code, _ := strconv.Atoi(arg)
		if code == 0 {
			code = 3
		}
		fmt.Fprintln(os.Stderr, "fake agent: crashing on purpose with code", code)
		os.Exit(code)
	case "pid":
		r.say("pid " + strconv.Itoa(os.Getpid()) + "\n")
	case "read":
		b, err := os.ReadFile(arg)
		if err != nil {
			r.say("read error: " + err.Error() + "\n")
			return
		}
		r.say("read ok: " + string(b) + "\n")
	case "write":
		path, content, _ := strings.Cut(arg, " ")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			r.say("write error: " + err.Error() + "\n")
			return
		}
		r.say("write ok\n")
	case "exec":
		cmd := exec.CommandContext(r.ctx, "sh", "-c", arg)
		cmd.Dir = r.s.Cwd
		out, err := cmd.CombinedOutput()
		status := "exit 0"
		if err != nil {
			status = "error: " + err.Error()
		}
		r.say("exec " + status + "\n" + string(out))
	case "env":
		env := os.Environ()
		sort.Strings(env)
		r.say(strings.Join(env, "\n") + "\n")
	case "connect", "connectunix":
		network := "tcp"
		if verb == "connectunix" {
			network = "unix"
		}
		c, err := net.DialTimeout(network, arg, 3*time.Second)
		if err != nil {
			r.say(verb + " error: " + err.Error() + "\n")
			return
		}
		c.Close()
		r.say(verb + " ok\n")
	case "http":
		head, payload, post := strings.Cut(arg, " -- ")
		f := strings.Fields(os.ExpandEnv(head))
		if len(f) < 3 {
			r.say("http: want URLVAR KEYVAR PATH [Name:value…] [-- BODY]\n")
			return
		}
		method, rd := "GET", io.Reader(nil)
		if post {
			method, rd = "POST", strings.NewReader(os.ExpandEnv(payload))
		}
		req, err := http.NewRequestWithContext(r.ctx, method, os.Getenv(f[0])+f[2], rd)
		if err != nil {
			r.say("http error: " + err.Error() + "\n")
			return
		}
		req.Header.Set("Authorization", "Bearer "+os.Getenv(f[1]))
		for _, h := range f[3:] {
			k, v, _ := strings.Cut(h, ":")
			req.Header.Add(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			r.say("http error: " + err.Error() + "\n")
			return
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		r.say(fmt.Sprintf("http %d %s\n", resp.StatusCode, strings.TrimSpace(string(body))))
	case "images": // the image blocks of this prompt: mimeType:base64 length
		r.say("images [" + strings.Join(r.images, " ") + "]\n")
	case "history":
		r.say(fmt.Sprintf("history %d: %s\n", len(r.s.Prompts), strings.Join(r.s.Prompts, " | ")))
	case "usage":
		in, out, _ := strings.Cut(arg, " ")
		i, _ := strconv.Atoi(in)
		o, _ := strconv.Atoi(out)
		r.usage = map[string]any{"inputTokens": i, "outputTokens": o, "totalTokens": i + o}
	case "update":
		r.a.update(id, json.RawMessage(arg))
	case "flood":
		count, size, _ := strings.Cut(arg, " ")
		n, _ := strconv.Atoi(count)
		b, _ := strconv.Atoi(size)
		delta := strings.Repeat("x", max(b, 1))
		for i := 0; i < n && r.ctx.Err() == nil; i++ {
			r.say(delta)
		}
	case "mcp":
		server, rest, _ := strings.Cut(arg, " ")
		tool, args, _ := strings.Cut(rest, " ")
		out, err := r.callMCP(server, tool, args)
		if err != nil {
			r.say("mcp error: " + err.Error() + "\n")
			return
		}
		r.say("mcp result: " + out + "\n")
	case "stop":
		r.stop = arg
	case "model":
		r.s.mu.Lock()
		m := r.s.Model
		r.s.mu.Unlock()
		if m == "" {
			m = "default"
		}
		r.say("model " + m + "\n")
	default:
		r.say("unknown directive " + verb + "\n")
	}
}

var errNoServer = errors.New("no such MCP server")
