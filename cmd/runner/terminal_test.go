package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/creack/pty"
)

// asRunnerEnv makes the test binary the runner itself (main), so tests
// can drive `runner run` in a real pseudo-terminal.
const asRunnerEnv = "RUNNER_TEST_AS_RUNNER"

// liveBuffer is output that can be waited on.
type liveBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	change chan struct{} // closed and replaced on each write
	ended  chan struct{} // closed when no more output comes; nil: never
}

func newLiveBuffer() *liveBuffer { return &liveBuffer{change: make(chan struct{})} }

func (l *liveBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.change)
	l.change = make(chan struct{})
	return l.b.Write(p)
}

func (l *liveBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until the output matches re and returns it.
func (l *liveBuffer) waitFor(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		out, change := l.b.String(), l.change
		l.mu.Unlock()
		if rx.MatchString(out) {
			return out
		}
		select {
		case <-change:
		case <-l.ended:
			if o := l.String(); !rx.MatchString(o) {
				t.Fatalf("the output ended without %q:\n%s", re, o)
			}
		case <-timeout:
			t.Fatalf("no %q within 30s; output:\n%s", re, l.String())
		}
	}
}

// term is `runner <args>` running on a pseudo-terminal.
type term struct {
	t      *testing.T
	cmd    *exec.Cmd
	pty    *os.File
	copied chan struct{} // closed when the terminal's output ends
	out    *liveBuffer
}

func startTerm(t *testing.T, env []string, args ...string) *term {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(env, asRunnerEnv+"=1", "TERM=xterm")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	return attach(t, cmd, f)
}

// attach reads the terminal of the started cmd until it exits.
func attach(t *testing.T, cmd *exec.Cmd, f *os.File) *term {
	tm := &term{t: t, cmd: cmd, pty: f, copied: make(chan struct{}), out: newLiveBuffer()}
	tm.out.ended = tm.copied
	go func() {
		defer close(tm.copied)
		_, _ = io.Copy(tm.out, f) // until EIO: the runner exited
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		f.Close()
		<-tm.copied
	})
	return tm
}

func (tm *term) output() string { return tm.out.String() }

// waitFor waits until the terminal shows a match of re and returns the
// output so far.
func (tm *term) waitFor(re string) string {
	tm.t.Helper()
	return tm.out.waitFor(tm.t, re)
}

func (tm *term) typ(s string) {
	tm.t.Helper()
	if _, err := tm.pty.WriteString(s); err != nil {
		tm.t.Fatal(err)
	}
}

// exit waits for the runner to exit and returns its exit code.
func (tm *term) exit() int {
	tm.t.Helper()
	done := make(chan error, 1)
	go func() { done <- tm.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			tm.t.Fatal(err)
		}
		<-tm.copied
		return tm.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = tm.cmd.Process.Kill()
		<-done
		tm.t.Fatalf("the runner did not exit within 30s; terminal:\n%s", tm.output())
		return -1
	}
}

var pidLine = regexp.MustCompile(`pid (\d+)`)

func pids(out string) []int {
	var ps []int
	for _, m := range pidLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		ps = append(ps, n)
	}
	return ps
}

// gone reports whether pid has exited (a zombie nobody reaped counts).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

func TestTerminalStreamsTextBeforeTheTurnEndsAndCtrlCCancels(t *testing.T) {
	env := testEnv(t, "NO_COLOR=1")
	data := dataDir(env)
	for _, session := range []string{"", "s1"} {
		t.Run("session="+session, func(t *testing.T) {
			args := []string{"run", "-harness", "fake", "-prompt", "pid\nsay first words\nsleep 1h"}
			if session != "" {
				args = append(args, "-session", session)
			}
			tm := startTerm(t, env, args...)
			// The turn cannot end before Ctrl-C (it sleeps for an hour),
			// so text on the terminal now was streamed.
			out := tm.waitFor(`first words`)
			pid := pids(out)[0]
			if gone(pid) {
				t.Fatalf("harness %d not running while its turn streams", pid)
			}
			tm.typ("\x03")
			if code := tm.exit(); code != exitInterrupted {
				t.Errorf("exit code %d, want %d; terminal:\n%s", code, exitInterrupted, tm.output())
			}
			out = tm.output()
			for _, want := range []string{"cancelling the turn", "─ cancelled"} {
				if !strings.Contains(out, want) {
					t.Errorf("terminal lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "\x1b[") {
				t.Errorf("colour with NO_COLOR set:\n%q", out)
			}
			if !gone(pid) {
				t.Errorf("harness %d survived Ctrl-C", pid)
			}
			if left, _ := filepath.Glob(filepath.Join(data, "sandboxes", "local-*")); len(left) > 0 {
				t.Errorf("sandboxes not released: %v", left)
			}
		})
	}
}

func TestTerminalApprovalContinuesTheSameHarnessProcess(t *testing.T) {
	env := testEnv(t)
	tm := startTerm(t, env, "run", "-harness", "fake", "-ask", "-prompt", "pid\npermission deploy\npid\nsay after approval")
	out := tm.waitFor(`allow once \[a\] / deny \[d\]\? $`)
	for _, want := range []string{"approval needed", "execute deploy", `{"command":"deploy"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("the question lacks %q:\n%s", want, out)
		}
	}
	tm.typ("x") // not an answer: asked again
	tm.waitFor(`\? x\r?\n.*allow once \[a\] / deny \[d\]\? $`)
	tm.typ("a") // one key, no Enter
	if code := tm.exit(); code != 0 {
		t.Fatalf("exit code %d; terminal:\n%s", code, tm.output())
	}
	out = tm.output()
	ps := pids(out)
	if len(ps) != 2 || ps[0] != ps[1] {
		t.Fatalf("pids before and after the approval %v, want one harness process; terminal:\n%s", ps, out)
	}
	for _, want := range []string{"permission selected:yes-once", "after approval", "─ end_turn"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "\x1b[") {
		t.Errorf("no colour on a terminal:\n%q", out)
	}
}

func TestTerminalDenyShowsDeniedInRed(t *testing.T) {
	tm := startTerm(t, testEnv(t), "run", "-harness", "fake", "-ask", "-prompt", "permission rm\nsay told no")
	tm.waitFor(`deny \[d\]\? $`)
	tm.typ("d")
	if code := tm.exit(); code != 0 {
		t.Fatalf("exit code %d; terminal:\n%s", code, tm.output())
	}
	out := tm.output()
	if !strings.Contains(out, sgrRedDenied) || !strings.Contains(out, "permission selected:no") {
		t.Fatalf("no red denied or the harness never heard no:\n%q", out)
	}
}

const sgrRedDenied = "\x1b[31mdenied\x1b[0m"

// Without a terminal to ask on, a paused turn fails at once with the
// interaction's id and the HTTP call that answers it.
func TestAskWithoutTerminalFailsFast(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"run", "-harness", "fake", "-ask", "-o", "text", "-prompt", "permission deploy"}, testEnv(t), strings.NewReader(""), &out, &errb)
	if code != exitPaused {
		t.Fatalf("exit code %d, want %d; %s %s", code, exitPaused, out.String(), errb.String())
	}
	m := regexp.MustCompile(`interaction (int_[0-9a-f]+) in session (cli-[0-9a-f]+)`).FindStringSubmatch(errb.String())
	if m == nil || !strings.Contains(errb.String(), "curl") || !strings.Contains(errb.String(), "/v1/sessions/"+m[2]+"/interactions/"+m[1]) {
		t.Fatalf("stderr does not say how to answer:\n%s", errb.String())
	}
}

func TestRunOutputFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "yaml"}, `-o "yaml": want text, json or ndjson`},
		{[]string{"-stream", "-o", "json"}, "-stream is -o ndjson"},
		{[]string{"-workdir", "/nonexistent/dir"}, "-workdir /nonexistent/dir"},
		{[]string{"-workdir", ".", "-url", "http://127.0.0.1:1"}, "in-process only"},
	} {
		var errb bytes.Buffer
		args := append([]string{"run", "-harness", "fake", "-prompt", "say x"}, tc.args...)
		if code := run(t.Context(), args, testEnv(t), nil, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: code %d stderr %q, want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
	var out bytes.Buffer
	if code := run(t.Context(), []string{"run", "-harness", "fake", "-o", "text", "say plain", "text"}, testEnv(t), nil, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "plain text\n─ end_turn") {
		t.Fatalf("text output: %d %q", code, out.String())
	}
}

// -workdir: the harness works in the person's directory, which stays
// theirs: a session's next turn restores nothing over it, and nothing is
// put in or beside it.
func TestRunWorkdir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t)
	var out bytes.Buffer
	code := run(t.Context(), []string{"run", "-harness", "fake", "-o", "text", "-session", "w", "-workdir", dir, "-prompt", "read notes.txt\nwrite made.txt by the agent"}, env, nil, &out, io.Discard)
	if code != 0 || !strings.Contains(out.String(), "read ok: mine") {
		t.Fatalf("code %d: %s", code, out.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "made.txt")); err != nil || string(b) != "by the agent" {
		t.Fatalf("made.txt = %q, %v; terminal:\n%s", b, err, out.String())
	}
	// The person works on between turns; the next (cold) turn sees it.
	if err := os.WriteFile(filepath.Join(dir, "later.txt"), []byte("by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code = run(t.Context(), []string{"run", "-harness", "fake", "-o", "text", "-session", "w", "-workdir", dir, "-prompt", "read later.txt"}, env, nil, &out, io.Discard)
	if code != 0 || !strings.Contains(out.String(), "read ok: by hand") {
		t.Fatalf("second turn: code %d: %s", code, out.String())
	}
	var names []string
	for _, d := range []string{dir, parent} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			names = append(names, filepath.Join(filepath.Base(d), e.Name()))
		}
	}
	if want := []string{"project/later.txt", "project/made.txt", "project/notes.txt", filepath.Base(parent) + "/project"}; !slices.Equal(names, want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
}

// -session continues a session cold from the ledger in-process.
func TestRunSessionContinuesFromTheLedger(t *testing.T) {
	env := testEnv(t)
	var out bytes.Buffer
	for _, p := range []string{"say one", "history"} {
		out.Reset()
		if code := run(context.Background(), []string{"run", "-harness", "fake", "-o", "text", "-session", "notes", "-prompt", p}, env, nil, &out, io.Discard); code != 0 {
			t.Fatalf("%q: code %d: %s", p, code, out.String())
		}
	}
	if !strings.Contains(out.String(), "say one") {
		t.Fatalf("the second turn did not see the first:\n%s", out.String())
	}
}

func dataDir(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "AGENTA_RUNNER_DATA_DIR="); ok {
			return v
		}
	}
	return ""
}

// serveInProcess runs `runner serve` in this process on a listener it opens and
// returns its base URL and the environment that reaches it.
func serveInProcess(t *testing.T) (string, []string) {
	t.Helper()
	ln, base := runnertest.Listen(t)
	// The port names the listener to the CLI, which finds the service
	// there; serve itself takes the listener.
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken, "AGENTA_RUNNER_PORT="+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr runnertest.SyncBuffer
	go func() { done <- run(withListener(ctx, ln), []string{"serve"}, env, nil, io.Discard, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, stderr.String())
		}
	})
	runnertest.WaitHealthy(t, base, nil, nil)
	return base, env
}

// Against a running service: the same rendering, an approval answered on
// the terminal resumes the parked harness over POST
// /v1/sessions/{id}/interactions/{iid}, and a session's next turn is warm.
func TestTerminalAgainstTheService(t *testing.T) {
	base, env := serveInProcess(t)
	env = append(env, "NO_COLOR=1")

	tm := startTerm(t, env, "run", "-url", base, "-harness", "fake", "-ask", "-prompt", "pid\npermission deploy\npid")
	tm.waitFor(`approval needed: execute deploy(.|\n)*deny \[d\]\? $`)
	tm.typ("a\n")
	if code := tm.exit(); code != 0 {
		t.Fatalf("exit code %d; terminal:\n%s", code, tm.output())
	}
	if ps := pids(tm.output()); len(ps) != 2 || ps[0] != ps[1] {
		t.Fatalf("pids %v, want one harness process; terminal:\n%s", ps, tm.output())
	}

	// -session without -url finds the service on its address and keeps
	// the harness warm between turns.
	var first []int
	for i := range 2 {
		tm := startTerm(t, env, "run", "-harness", "fake", "-session", "warm1", "-prompt", "pid")
		if code := tm.exit(); code != 0 {
			t.Fatalf("turn %d: exit code %d; terminal:\n%s", i, code, tm.output())
		}
		if !strings.Contains(tm.output(), "on the service at "+base) {
			t.Errorf("turn %d does not say it ran on the service:\n%s", i, tm.output())
		}
		ps := pids(tm.output())
		if len(ps) != 1 {
			t.Fatalf("turn %d: terminal:\n%s", i, tm.output())
		}
		first = append(first, ps[0])
	}
	if first[0] != first[1] {
		t.Errorf("session turns ran in harness processes %v, want the warm one again", first)
	}

	var list bytes.Buffer
	if code := run(t.Context(), []string{"sessions", "-o", "text", "-url", base}, env, nil, &list, io.Discard); code != 0 ||
		!regexp.MustCompile(`(?m)^SESSION +PROJECT +HARNESS +STATE +TURNS +UPDATED\n(.|\n)*^warm1 +cli +fake +warm +2 `).MatchString(list.String()) {
		t.Errorf("runner sessions: code %d\n%s", code, list.String())
	}

	// Ctrl-C over the service: /kill cancels the turn and releases the
	// session's harness.
	tm = startTerm(t, env, "run", "-url", base, "-harness", "fake", "-session", "killme", "-prompt", "pid\nsleep 1h")
	pid := pids(tm.waitFor(`pid \d+\r?\n`))[0]
	tm.typ("\x03")
	if code := tm.exit(); code != exitInterrupted {
		t.Errorf("exit code %d, want %d; terminal:\n%s", code, exitInterrupted, tm.output())
	}
	if !gone(pid) {
		t.Errorf("harness %d survived Ctrl-C", pid)
	}
}

// With no terminal, the paused turn's message names the interaction and a
// curl; that HTTP call really continues the parked turn.
func TestAskWithoutTerminalOnTheServiceAnswersOverHTTP(t *testing.T) {
	base, env := serveInProcess(t)
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"run", "-url", base, "-harness", "fake", "-ask", "-o", "text", "-prompt", "permission deploy\nsay went on"}, env, strings.NewReader(""), &out, &errb)
	if code != exitPaused {
		t.Fatalf("exit code %d, want %d; %s %s", code, exitPaused, out.String(), errb.String())
	}
	m := regexp.MustCompile(`-d '(\{"approved":true\})' (http://\S+/v1/sessions/\S+/interactions/int_[0-9a-f]+)`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no curl in:\n%s", errb.String())
	}
	req, _ := http.NewRequest(http.MethodPost, m[2], strings.NewReader(m[1]))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "permission selected:yes-once") || !strings.Contains(string(body), "went on") {
		t.Fatalf("answering over HTTP: %s\n%s", resp.Status, body)
	}
}

// runner sessions tail follows a session's events live, rendered.
func TestSessionsTailFollowsLive(t *testing.T) {
	base, env := serveInProcess(t)
	var out bytes.Buffer
	if code := run(t.Context(), []string{"run", "-url", base, "-harness", "fake", "-session", "tailed", "-o", "text", "-prompt", "say first turn"}, env, nil, &out, io.Discard); code != 0 {
		t.Fatalf("first turn: %d %s", code, out.String())
	}
	ctx, cancel := context.WithCancel(t.Context())
	tail := newLiveBuffer()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"sessions", "tail", "-o", "text", "-url", base, "tailed"}, env, nil, tail, io.Discard)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("tail exited %d", code)
		}
	}()
	out.Reset()
	if code := run(t.Context(), []string{"run", "-url", base, "-harness", "fake", "-session", "tailed", "-o", "text", "-prompt", "tool Read {\"path\":\"x\"} => data\nsay second turn"}, env, nil, &out, io.Discard); code != 0 {
		t.Fatalf("second turn: %d %s", code, out.String())
	}
	// The tail renders the turn it watched; its last event is done.
	tail.waitFor(t, `(?s)› say first turn\n.*first turn\n─ end_turn\n.*⏺ Read  x\n  ⎿ data\n.*second turn\n─ end_turn\n`)
}

// -request keeps a person's settings in a file; the prompt is added.
func TestRunRequestFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(file, []byte(`{"harness":"fake","permissions":{"default":"allow"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"run", "-o", "text", "-request", file, "say now"}, testEnv(t), nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "now\n") {
		t.Fatalf("code %d: %q %s", code, out.String(), errb.String())
	}
	if err := os.WriteFile(file, []byte(`[1]`), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run(t.Context(), []string{"run", "-request", file, "say now"}, testEnv(t), nil, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "-request "+file+": not a JSON object") {
		t.Fatalf("bad file: code %d: %s", code, errb.String())
	}
}

// Ctrl-C at the question cancels the paused turn and releases its parked
// harness.
func TestTerminalCtrlCAtTheQuestion(t *testing.T) {
	tm := startTerm(t, testEnv(t, "NO_COLOR=1"), "run", "-harness", "fake", "-ask", "-prompt", "pid\npermission deploy")
	pid := pids(tm.waitFor(`deny \[d\]\? $`))[0]
	tm.typ("\x03")
	if code := tm.exit(); code != exitInterrupted {
		t.Errorf("exit code %d, want %d", code, exitInterrupted)
	}
	if out := tm.output(); !regexp.MustCompile(`\? \^C\r?\ncancelling the turn(.|\n)*─ cancelled`).MatchString(out) {
		t.Errorf("terminal:\n%s", out)
	}
	if !gone(pid) {
		t.Errorf("parked harness %d survived Ctrl-C", pid)
	}
}

// A second Ctrl-C quits at once, even while the first one's cancel hangs
// (here a service whose /kill never answers).
func TestTerminalSecondCtrlCQuitsAtOnce(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream":
			w.Header().Set("Content-Type", "application/x-ndjson")
			_, _ = io.WriteString(w, `{"kind":"event","seq":1,"event":{"type":"message_delta","id":"m1","delta":"working"}}`+"\n")
			w.(http.Flusher).Flush()
		}
		select { // the turn, and /kill, never end
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	tm := startTerm(t, testEnv(t, "NO_COLOR=1", "AGENTA_RUNNER_TOKEN="+testToken), "run", "-url", srv.URL, "-session", "stuck", "-harness", "fake", "-prompt", "hi")
	tm.waitFor(`working`)
	tm.typ("\x03")
	tm.waitFor(`cancelling the turn`)
	tm.typ("\x03")
	if code := tm.exit(); code != exitInterrupted {
		t.Errorf("exit code %d, want %d", code, exitInterrupted)
	}
	if out := tm.output(); !strings.Contains(out, "runner run: interrupted") {
		t.Errorf("terminal:\n%s", out)
	}
}

// A line typed while the turn runs does not answer the question that
// comes after it.
func TestTerminalTypeAheadIsNoAnswer(t *testing.T) {
	tm := startTerm(t, testEnv(t, "NO_COLOR=1"), "run", "-harness", "fake", "-ask", "-session", "ahead", "-prompt", "say started\nsleep 1s\npermission deploy")
	tm.waitFor(`started`)
	tm.typ("a\n") // typed before any question
	tm.waitFor(`deny \[d\]\? $`)
	tm.typ("d\n")
	if code := tm.exit(); code != 0 {
		t.Fatalf("exit code %d; terminal:\n%s", code, tm.output())
	}
	if out := tm.output(); !strings.Contains(out, "permission selected:no") {
		t.Fatalf("the typed-ahead line answered the question:\n%s", out)
	}
}

// A request piped on stdin is still answered on the terminal the person
// watches (/dev/tty).
func TestTerminalApprovalWithTheRequestPiped(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "run", "-o", "text")
	cmd.Env = append(testEnv(t, "NO_COLOR=1"), asRunnerEnv+"=1")
	cmd.Stdin = strings.NewReader(`{"harness":"fake","sessionId":"piped","permissions":{"default":"ask"},"messages":[{"role":"user","content":"permission deploy\nsay went on"}]}`)
	// stdout (fd 1) is the terminal and becomes the controlling one.
	f, err := pty.StartWithAttrs(cmd, nil, &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 1})
	if err != nil {
		t.Fatal(err)
	}
	tm := attach(t, cmd, f)
	tm.waitFor(`deny \[d\]\? $`)
	tm.typ("a\n")
	if code := tm.exit(); code != 0 {
		t.Fatalf("exit code %d; terminal:\n%s", code, tm.output())
	}
	if out := tm.output(); !strings.Contains(out, "permission selected:yes-once") || !strings.Contains(out, "went on") {
		t.Fatalf("terminal:\n%s", out)
	}
}
