package tenanttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/wire"
)

// token is the runner's token in every test; a test that looks for it
// where it must not be searches for this string.
const token = "tenanttest-runner-token-5f0c2b9e"

// runnerBin is the runner built once for the whole suite (TestMain).
var runnerBin string

func TestMain(m *testing.M) {
	agenttest.MaybeRun()
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tenanttest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tenanttest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	runnerBin = filepath.Join(dir, "runner")
	args := []string{"build", "-o", runnerBin}
	if raceBuild {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "github.com/agentrunner/runner/cmd/runner")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "tenanttest: go build the runner: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// isolation is the local provider's isolation the suite attacks: bwrap,
// as in production. RUNNER_TEST_BWRAP=1 (CI) makes a missing bwrap fail
// the test instead of skipping it.
func needBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("RUNNER_TEST_BWRAP") == "1" {
			t.Fatal("bwrap is required (RUNNER_TEST_BWRAP=1): apt-get install bubblewrap")
		}
		t.Skip("bwrap not installed; apt-get install bubblewrap")
	}
}

// runner is one `runner serve` process under attack.
type runner struct {
	Base    string // http://127.0.0.1:<port>
	DataDir string
	Home    string // the runner's own $HOME
	env     []string
	log     *syncBuffer
	cmd     *exec.Cmd
	done    chan struct{}
	// wrap, when set, is the command line runner serve runs under (a
	// private mount namespace with a test /etc/hosts).
	wrap []string
}

// start runs `runner serve` on a fresh data dir with bwrap isolation and
// the fake harness, plus env (later entries win), and waits until /health
// answers. The listening socket is opened here and passed in (socket
// activation), so no port is raced for.
func start(t testing.TB, env ...string) *runner {
	t.Helper()
	return startWrapped(t, nil, env...)
}

// startWrapped is start with runner serve run as wrap... runner serve.
func startWrapped(t testing.TB, wrap []string, env ...string) *runner {
	t.Helper()
	dir := t.TempDir()
	r := &runner{DataDir: filepath.Join(dir, "data"), Home: filepath.Join(dir, "home"), log: &syncBuffer{}, wrap: wrap}
	if err := os.MkdirAll(r.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	r.env = append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + r.Home,
		"AGENTA_RUNNER_DATA_DIR=" + r.DataDir,
		"AGENTA_RUNNER_TOKEN=" + token,
		"AGENTA_RUNNER_LOG_LEVEL=info",
		"AGENTA_RUNNER_HARNESS_FAKE=" + strings.Join(agenttest.Command(), " "),
	}, env...)
	r.run(t)
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *runner) run(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close() // f holds the socket
	if err != nil {
		t.Fatal(err)
	}
	r.Base = "http://" + ln.Addr().String()
	argv := append(append([]string(nil), r.wrap...), runnerBin, "serve")
	r.cmd = exec.Command(argv[0], argv[1:]...)
	r.cmd.Env = append(append([]string(nil), r.env...), "LISTEN_FDS=1")
	r.cmd.ExtraFiles = []*os.File{f}
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	err = r.cmd.Start()
	// Only the runner holds the socket now: one that dies at boot leaves
	// nothing accepting, so the wait below fails instead of hanging on a
	// backlog nobody serves.
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r.done = make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(time.Minute)
	probe := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := probe.Get(r.Base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-r.done:
			t.Fatalf("runner serve exited before answering /health:\n%s", r.log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner serve did not answer /health within a minute:\n%s", r.log)
		}
	}
}

// stop sends SIGINT and waits for the runner to exit (SIGKILL after 30 s).
func (r *runner) stop(t testing.TB) {
	t.Helper()
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
		t.Errorf("runner serve did not stop within 30s of SIGINT")
	}
	if t.Failed() {
		t.Logf("runner serve log:\n%s", r.log)
	}
	r.cmd = nil
}

// restart stops the runner and starts it again on the same data dir.
func (r *runner) restart(t *testing.T) {
	t.Helper()
	r.stop(t)
	r.run(t)
}

// Log is what the runner has written to stdout and stderr so far.
func (r *runner) Log() string { return r.log.String() }

// turn is what one streamed turn returned.
type turn struct {
	Status int
	Events []wire.Event
	Result wire.Result
	Raw    []byte // the whole response body
}

// Text is the concatenated message deltas of the turn.
func (tr turn) Text() string {
	var b strings.Builder
	for _, e := range tr.Events {
		if e.Type == "message_delta" {
			b.WriteString(e.Delta)
		}
	}
	return b.String()
}

// fake is a request for the fake harness: prompt is its directives, one
// per line; fields are merged over it (sessionId, projectId, agentsMd, …).
func fake(prompt string, fields map[string]any) map[string]any {
	req := map[string]any{"harness": "fake", "messages": []any{map[string]any{"role": "user", "content": prompt}}}
	for k, v := range fields {
		req[k] = v
	}
	return req
}

// stream sends req to /stream as NDJSON and reads the whole stream. A
// non-200 answer is returned with its body in Raw and Result.Error.
func (r *runner) stream(t *testing.T, req any) turn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	resp := r.do(t, ctx, "POST", "/stream", req, "application/x-ndjson")
	defer resp.Body.Close()
	var tr turn
	tr.Status = resp.StatusCode
	body, err := io.ReadAll(resp.Body)
	tr.Raw = body
	if err != nil {
		t.Fatalf("read /stream: %v", err)
	}
	if resp.StatusCode != 200 {
		_ = json.Unmarshal(body, &tr.Result)
		return tr
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	sawResult := false
	for sc.Scan() {
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("bad NDJSON line %.200q: %v", sc.Bytes(), err)
		}
		switch {
		case rec.Event != nil:
			tr.Events = append(tr.Events, *rec.Event)
		case rec.Result != nil:
			tr.Result, sawResult = *rec.Result, true
		}
	}
	if !sawResult {
		t.Fatalf("stream ended without a result (%d bytes):\n%.2000s", len(body), body)
	}
	return tr
}

// call sends an authenticated request with a JSON body (nil for none)
// and returns the status and body.
func (r *runner) call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	resp := r.do(t, ctx, method, path, body, "application/json")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func (r *runner) do(t testing.TB, ctx context.Context, method, path string, body any, accept string) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(r.request(t, ctx, method, path, body, accept))
	if err != nil {
		t.Fatalf("%s %s: %v\nrunner log:\n%s", method, path, err, r.log)
	}
	return resp
}

// request is an authenticated request with a JSON body (nil for none).
func (r *runner) request(t testing.TB, ctx context.Context, method, path string, body any, accept string) *http.Request {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.Base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	return req
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
