package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// asRunnerEnv makes the test binary the runner itself (main), so tests
// can drive `runner run` in a real pseudo-terminal.
const asRunnerEnv = "RUNNER_TEST_AS_RUNNER"

// term is `runner <args>` running on a pseudo-terminal.
type term struct {
	t      *testing.T
	cmd    *exec.Cmd
	pty    *os.File
	copied chan struct{} // closed when the terminal's output ends

	mu     sync.Mutex
	out    bytes.Buffer
	change chan struct{} // closed and replaced on each write to out
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
	tm := &term{t: t, cmd: cmd, pty: f, copied: make(chan struct{}), change: make(chan struct{})}
	go func() {
		defer close(tm.copied)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			close(tm.change)
			tm.change = make(chan struct{})
			tm.mu.Unlock()
			if err != nil {
				return // EIO once the runner exits
			}
		}
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

func (tm *term) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

// waitFor waits until the terminal shows a match of re and returns the
// output so far.
func (tm *term) waitFor(re string) string {
	tm.t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(30 * time.Second)
	for {
		tm.mu.Lock()
		out, change := tm.out.String(), tm.change
		tm.mu.Unlock()
		if rx.MatchString(out) {
			return out
		}
		select {
		case <-change:
		case <-tm.copied:
			if o := tm.output(); !rx.MatchString(o) {
				tm.t.Fatalf("the runner exited without showing %q; terminal:\n%s", re, o)
			}
		case <-timeout:
			tm.t.Fatalf("no %q on the terminal within 30s; terminal:\n%s", re, tm.output())
		}
	}
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
	tm.typ("maybe\n") // not an answer: asked again
	tm.waitFor(`maybe\r?\n.*allow once \[a\] / deny \[d\]\? $`)
	tm.typ("a\n")
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
	tm.typ("d\n")
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
