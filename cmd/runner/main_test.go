package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

func TestMain(m *testing.M) {
	agenttest.MaybeRun()
	if os.Getenv(asRunnerEnv) == "1" {
		main() // the runner itself, driven in a pseudo-terminal
	}
	// Inside sandboxes the runner binary is invoked for these; in tests
	// that binary is this one.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "sandbox-proxy-bridge", "mcp-stdio", "sandboxd", "channel-forward", "sandbox-net-setup":
			os.Exit(run(context.Background(), os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
		}
	}
	goleak.VerifyTestMain(m, leaktest.Global()...)
}

const testToken = "cmd-test-token-0123456789"

func testEnv(t *testing.T, extra ...string) []string {
	return append([]string{
		"PATH=/usr/bin:/bin",
		"HOME=" + t.TempDir(),
		"AGENTA_RUNNER_DATA_DIR=" + t.TempDir(),
		"AGENTA_RUNNER_LOCAL_ISOLATION=none",
		"AGENTA_RUNNER_LOG_LEVEL=warn",
		"AGENTA_RUNNER_HARNESS_FAKE=" + strings.Join(agenttest.Command(), " "),
	}, extra...)
}

func TestServeRefusesWithoutToken(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"serve"}, testEnv(t), nil, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "AGENTA_RUNNER_TOKEN is required") || !strings.Contains(errb.String(), "openssl rand") {
		t.Fatalf("code %d stderr %q", code, errb.String())
	}
}

func TestServeReportsEveryConfigProblem(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"serve"}, testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken, "AGENTA_RUNNER_PORT=99999", "AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=local,e2b"), nil, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "AGENTA_RUNNER_PORT") || !strings.Contains(errb.String(), "e2b") {
		t.Fatalf("code %d stderr %q", code, errb.String())
	}
}

func TestServeTurnAndShutdown(t *testing.T) {
	ln, base := runnertest.Listen(t)
	// The turn sleeps past the drain: shutdown cancels it.
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken, "AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS=300")
	ctx, cancel := context.WithCancel(t.Context())
	var stderr runnertest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(withListener(ctx, ln), []string{"serve"}, env, nil, io.Discard, &stderr) }()
	runnertest.WaitHealthy(t, base, nil, nil)

	var hout, herr bytes.Buffer
	if code := run(t.Context(), []string{"health", "--url", base}, env, nil, &hout, &herr); code != 0 || !strings.Contains(hout.String(), `"fake"`) {
		t.Fatalf("runner health: %d %s %s", code, hout.String(), herr.String())
	}
	hout.Reset()
	if code := run(t.Context(), []string{"sessions", "--url", base}, env, nil, &hout, &herr); code != 0 || !strings.Contains(hout.String(), `"sessions"`) {
		t.Fatalf("runner sessions: %d %s %s", code, hout.String(), herr.String())
	}
	if code := run(t.Context(), []string{"sessions", "--url", base, "nope"}, env, nil, &hout, &herr); code != 1 {
		t.Fatalf("runner sessions of an unknown session: %d", code)
	}

	// A turn in flight when SIGTERM arrives is cancelled and its harness is gone.
	body := `{"harness":"fake","messages":[{"role":"user","content":"pid\nsleep 1h"}]}`
	req, _ := http.NewRequest("POST", base+"/stream", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	pid := 0
	text := ""
	for pid == 0 && sc.Scan() {
		var r wire.Record
		_ = json.Unmarshal(sc.Bytes(), &r)
		if r.Event != nil && r.Event.Type == "message_delta" {
			text += r.Event.Delta
			if strings.HasSuffix(text, "\n") {
				pid, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(text, "pid ")))
			}
		}
	}
	if pid == 0 {
		t.Fatalf("no pid; stderr: %s", stderr.String())
	}
	start := time.Now()
	cancel() // what SIGTERM does through signal.NotifyContext
	var last wire.Record
	for sc.Scan() {
		_ = json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Kind != "result" || last.Result.OK || !strings.Contains(last.Result.Error, "shutting down") {
		t.Errorf("last record %+v", last)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit within 20s of shutdown")
	}
	t.Logf("shutdown took %s", time.Since(start))
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("harness pid %d survived shutdown", pid)
	}
}

func TestRunCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"run", "--harness", "fake", "--prompt", "say hi from cli"}, testEnv(t), nil, &out, &errb)
	if code != 0 {
		t.Fatalf("code %d: %s %s", code, out.String(), errb.String())
	}
	var res wire.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || !res.OK || res.Output != "hi from cli" {
		t.Fatalf("result %s (%v)", out.String(), err)
	}

	out.Reset()
	stdin := strings.NewReader(`{"harness":"fake","messages":[{"role":"user","content":"say streamed"}]}`)
	code = run(t.Context(), []string{"run", "--stream"}, testEnv(t), stdin, &out, &errb)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if code != 0 || !strings.Contains(lines[len(lines)-1], `"kind":"result"`) {
		t.Fatalf("code %d stream %q", code, out.String())
	}

	out.Reset()
	code = run(t.Context(), []string{"run", "--harness", "fake", "--prompt", "crash 5"}, testEnv(t), nil, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "crashing on purpose") {
		t.Fatalf("failed turn: code %d out %s", code, out.String())
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(t.Context(), []string{"version"}, nil, nil, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "runner ") {
		t.Fatalf("%d %q", code, out.String())
	}
}
