package tenanttest

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/runnertest"
)

// token is the runner's token in every test; a test that looks for it
// where it must not be searches for this string.
const token = "tenanttest-runner-token-5f0c2b9e"

// runnerBin is the runner built once for the whole suite (TestMain).
var runnerBin string

func TestMain(m *testing.M) {
	agenttest.MaybeRun()
	goleak.VerifyTestMain(suite{m}, leaktest.Global()...)
}

// suite builds the runner before the tests run; the leak check comes after.
type suite struct{ m *testing.M }

func (s suite) Run() int { return buildAndRun(s.m) }

func buildAndRun(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every attack skips (startWrapped): build nothing
	}
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
	log     *runnertest.SyncBuffer
	client  *runnertest.Client // at Base, with the token
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
	if testing.Short() {
		t.Skip("tenanttest runs runner serve processes: skipped under -short")
	}
	dir := t.TempDir()
	r := &runner{DataDir: filepath.Join(dir, "data"), Home: filepath.Join(dir, "home"), log: &runnertest.SyncBuffer{}, wrap: wrap}
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
	f, base := runnertest.Socket(t)
	r.Base = base
	r.client = &runnertest.Client{Base: base, Token: token, Log: r.log}
	argv := append(append([]string(nil), r.wrap...), runnerBin, "serve")
	r.cmd = exec.Command(argv[0], argv[1:]...)
	r.cmd.Env = append(append([]string(nil), r.env...), "LISTEN_FDS=1")
	r.cmd.ExtraFiles = []*os.File{f}
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	err := r.cmd.Start()
	// Only the runner holds the socket now: one that dies at boot leaves
	// nothing accepting, so the wait below fails instead of hanging on a
	// backlog nobody serves.
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r.done = make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	runnertest.WaitHealthy(t, r.Base, r.done, r.log)
}

// stop sends SIGINT and waits for the runner to exit (SIGKILL after 30 s).
func (r *runner) stop(t testing.TB) {
	t.Helper()
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(os.Interrupt)
	sent := time.Now()
	select {
	case <-r.done:
		t.Logf("runner serve exited %s after SIGINT", time.Since(sent).Round(time.Millisecond))
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
type turn = runnertest.Turn

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
	return r.client.Stream(t, req)
}

// call sends an authenticated request with a JSON body (nil for none)
// and returns the status and body.
func (r *runner) call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	return r.client.Call(t, method, path, body)
}

func (r *runner) do(t testing.TB, ctx context.Context, method, path string, body any, accept string) *http.Response {
	t.Helper()
	return r.client.Do(t, ctx, method, path, body, accept)
}

// request is an authenticated request with a JSON body (nil for none).
func (r *runner) request(t testing.TB, ctx context.Context, method, path string, body any, accept string) *http.Request {
	t.Helper()
	return r.client.Request(t, ctx, method, path, body, accept)
}
