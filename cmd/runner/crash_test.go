package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

// startServe starts `runner serve` as its own process on the socket sock
// (socket activation). The process is this test binary re-executed as the
// runner (TestMain runs main under asRunnerEnv): no `go build` in the
// test, and a -race test run kills a -race runner.
func startServe(t *testing.T, sock *os.File, env []string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "serve")
	cmd.Env = append(append([]string(nil), env...), "LISTEN_FDS=1", asRunnerEnv+"=1")
	cmd.ExtraFiles = []*os.File{sock}
	cmd.Stderr = &prefixWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

type prefixWriter struct{ t *testing.T }

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.t.Logf("runner: %s", strings.TrimSpace(string(b)))
	return len(b), nil
}

// TestKill9MidTurnThenRestart: a runner killed with SIGKILL mid-turn
// leaves no harness behind; restarted on the same data dir it marks the
// turn interrupted, reaps the sandbox, and the next turn of the session
// runs cold with the full history.
func TestKill9MidTurnThenRestart(t *testing.T) {
	data := t.TempDir()
	sock, base := runnertest.Socket(t)
	env := append(testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken), "AGENTA_RUNNER_DATA_DIR="+data)

	first := startServe(t, sock, env)
	runnertest.WaitHealthy(t, base, nil, nil)
	body := `{"harness":"fake","sessionId":"crash","projectId":"p","messages":[{"role":"user","content":"say remember the word ferret\npid\nsleep 1h"}]}`
	resp := post(t, base+"/stream", body)
	pid := readPid(t, resp.Body)

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("harness %d outlived its runner's SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}

	startServe(t, sock, env)
	runnertest.WaitHealthy(t, base, nil, nil)
	var sess struct {
		Turns []struct {
			Status string `json:"status"`
		} `json:"turns"`
	}
	getJSON(t, base+"/v1/sessions/crash", &sess)
	if len(sess.Turns) != 1 || sess.Turns[0].Status != "interrupted" {
		t.Fatalf("turns after restart: %+v", sess.Turns)
	}
	left, _ := filepath.Glob(filepath.Join(data, "sandboxes", "local-*"))
	if len(left) != 0 {
		t.Errorf("orphaned sandboxes not reaped: %v", left)
	}

	// The caller sends only its new message; the log supplies the rest.
	next := post(t, base+"/run", `{"harness":"fake","sessionId":"crash","projectId":"p","messages":[{"role":"user","content":"what was the word?"}]}`)
	defer next.Body.Close()
	var res wire.Result
	if err := json.NewDecoder(next.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if !res.OK || !strings.Contains(res.Output, "ferret") {
		t.Fatalf("next turn after the crash: %+v", res)
	}
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	if strings.HasSuffix(url, "/stream") {
		req.Header.Set("Accept", "application/x-ndjson")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func readPid(t *testing.T, r io.Reader) int {
	t.Helper()
	sc := bufio.NewScanner(r)
	text := ""
	for sc.Scan() {
		var rec wire.Record
		_ = json.Unmarshal(sc.Bytes(), &rec)
		if rec.Event != nil && rec.Event.Type == "message_delta" {
			text += rec.Event.Delta
			if i := strings.Index(text, "pid "); i >= 0 && strings.HasSuffix(text, "\n") {
				pid, err := strconv.Atoi(strings.TrimSpace(text[i+4:]))
				if err == nil {
					return pid
				}
			}
		}
	}
	t.Fatal("stream ended before the harness reported its pid")
	return 0
}
