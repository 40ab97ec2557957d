package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

// serveOn runs `runner serve` in-process on a listener of the test's and
// returns its base URL; the service stops when the test ends.
func serveOn(t *testing.T, env []string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(withListener(context.Background(), ln))
	var stderr runnertest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, env, nil, io.Discard, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop within 30s")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", stderr.String())
		}
	})
	base := "http://" + ln.Addr().String()
	runnertest.WaitHealthy(t, base, nil, nil)
	return base
}

func postTurn(t *testing.T, base, body string) wire.Result {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/run", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res wire.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRunBesideServeLeavesItsSockets: an in-process `runner run` on the
// service's data dir serves its own tool relay socket and removes only
// that one, so the service's next sandbox still binds the service's.
func TestRunBesideServeLeavesItsSockets(t *testing.T) {
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken)
	base := serveOn(t, env)
	if res := postTurn(t, base, `{"harness":"fake","messages":[{"role":"user","content":"say before"}]}`); !res.OK {
		t.Fatalf("turn before: %+v", res)
	}
	for _, args := range [][]string{
		{"run", "--harness", "fake", "--prompt", "say from the cli"},
		{"run", "--harness", "fake", "-workdir", t.TempDir(), "-session", "cli1", "--prompt", "say in a workdir"},
	} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), args, serviceEnv(env, base), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: code %d: %s %s", args, code, out.String(), errb.String())
		}
		// -workdir runs here although a service is up: it says so.
		if notice := strings.Contains(errb.String(), "running in-process") && strings.Contains(errb.String(), base); notice != slices.Contains(args, "-workdir") {
			t.Errorf("%v: stderr %q", args, errb.String())
		}
	}
	if res := postTurn(t, base, `{"harness":"fake","messages":[{"role":"user","content":"say after"}]}`); !res.OK || res.Output != "after" {
		t.Fatalf("the service's turn after runner run: %+v", res)
	}
}

// serviceEnv points runner run's service address (AGENTA_RUNNER_HOST and
// _PORT) at base.
func serviceEnv(env []string, base string) []string {
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	return append(append([]string(nil), env...), "AGENTA_RUNNER_HOST="+host, "AGENTA_RUNNER_PORT="+port)
}

// TestSecondServeOnOneDataDirIsRefused: two services on one data dir
// would share a replica id and recover each other's turns; the second is
// refused, naming the first's pid and the settings: its own data dir, or,
// as the SQLite store there serves one replica, a shared PostgreSQL.
func TestSecondServeOnOneDataDirIsRefused(t *testing.T) {
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken)
	serveOn(t, env)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Bounded: without the lock the second service would serve until
	// cancelled.
	ctx, cancel := context.WithTimeout(withListener(t.Context(), ln), 20*time.Second)
	defer cancel()
	var errb bytes.Buffer
	code := run(ctx, []string{"serve"}, env, nil, io.Discard, &errb)
	if code == 0 || !strings.Contains(errb.String(), "in use by another runner serve") || !strings.Contains(errb.String(), "AGENTA_RUNNER_DATA_DIR") || !strings.Contains(errb.String(), "AGENTA_RUNNER_DATABASE_URL") {
		t.Fatalf("second serve: code %d stderr %q", code, errb.String())
	}
}

// TestRunRefusesASessionTheServiceHolds: a session the service holds warm
// is not reopened by an in-process `runner run -workdir`; it is refused
// with where the turn can run instead.
func TestRunRefusesASessionTheServiceHolds(t *testing.T) {
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken)
	base := serveOn(t, env)
	if res := postTurn(t, base, `{"harness":"fake","sessionId":"held","projectId":"cli","messages":[{"role":"user","content":"say warm"}]}`); !res.OK {
		t.Fatalf("service turn: %+v", res)
	}
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"run", "--harness", "fake", "-o", "json", "-workdir", t.TempDir(), "-session", "held", "--prompt", "say again"}, env, nil, &out, &errb)
	if code == 0 || !strings.Contains(out.String()+errb.String(), "held by another runner on this data dir") || !strings.Contains(out.String()+errb.String(), "-url") {
		t.Fatalf("code %d out %s err %s", code, out.String(), errb.String())
	}
}

// TestToolSocketSweep: a socket whose process is gone (its lock free) is
// swept; one whose lock is held is not.
func TestToolSocketSweep(t *testing.T) {
	dir := t.TempDir()
	live, err := newToolSocket(filepath.Join(dir, "run"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.release()
	if err := os.WriteFile(live.Path, nil, 0o600); err != nil { // stands in for the socket
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "run", "tools-dead.sock")
	for _, p := range []string{stale, lockOf(stale)} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other, err := newToolSocket(filepath.Join(dir, "run"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.release()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale socket not swept: %v", err)
	}
	if _, err := os.Stat(live.Path); err != nil {
		t.Errorf("a live process's socket was swept: %v", err)
	}
	if other.Path == live.Path {
		t.Errorf("two processes got one socket path %s", live.Path)
	}
}
