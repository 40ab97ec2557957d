package sandboxd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentrunner/runner/internal/runnertest"
)

const testToken = "secret-token"

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}

// newTestServer serves a daemon over httptest; cfg.Token defaults to testToken.
func newTestServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.Workdir == "" {
		cfg.Workdir = t.TempDir()
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	return srv, hs
}

// call sends one request to the daemon at base with the test token and
// decodes its JSON answer into out.
func call(t *testing.T, c *http.Client, base, method, path string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s %s: decode: %v", method, path, err)
	}
}

func TestStartIsIdempotent(t *testing.T) {
	t.Parallel()
	srv, hs := newTestServer(t, Config{})
	req := StartRequest{ID: "fixed", Argv: []string{"cat"}, Env: testEnv}
	var p1, p2 StartResponse
	call(t, hs.Client(), hs.URL, http.MethodPost, "/v1/processes", req, &p1)
	call(t, hs.Client(), hs.URL, http.MethodPost, "/v1/processes", req, &p2)
	srv.mu.Lock()
	n := len(srv.entries)
	srv.mu.Unlock()
	if n != 1 || p1.ID != p2.ID {
		t.Errorf("two starts with one id made %d entries (%s, %s), want 1", n, p1.ID, p2.ID)
	}
}

// shortTempDir is a temp dir with a path short enough for a unix socket.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "sbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestMainNeedsToken(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "HOME" {
			return t.TempDir()
		}
		return ""
	}
	if code := Main(t.Context(), []string{"--listen", "127.0.0.1:0"}, getenv, io.Discard, &stderr); code != 1 {
		t.Errorf("Main without a token = %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "no token") {
		t.Errorf("stderr = %q, want it to name the missing token", stderr.String())
	}
}

func TestMainServes(t *testing.T) {
	t.Parallel()
	home := shortTempDir(t)
	d := startMain(t, home)
	var h Health
	call(t, http.DefaultClient, "http://"+d.addr, http.MethodGet, "/v1/health", nil, &h)
	if h.Version != "v9" || h.Home != home || h.Socket == "" {
		t.Errorf("health = %+v", h)
	}
	lockFile := filepath.Join(home, ".runner-sandboxd", "sandboxd.lock")
	if lockable(t, lockFile) {
		t.Errorf("the lock on %s is not held while the daemon serves", lockFile)
	}
	if got := d.stop(); got != 0 {
		t.Errorf("Main = %d after cancel, want 0; stderr:\n%s", got, d.stderr.String())
	}
	if !lockable(t, lockFile) {
		t.Errorf("the lock on %s is still held after the daemon ended", lockFile)
	}
	if _, err := os.Stat(filepath.Join(home, ".runner-sandboxd", "sandboxd.addr")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("addr file left behind: %v", err)
	}
}

// daemon is a Main running in this process.
type daemon struct {
	addr   string
	stderr *runnertest.SyncBuffer
	cancel context.CancelFunc
	code   chan int
	once   sync.Once
	exit   int
}

// stop ends Main and returns its exit code; it may be called again.
func (d *daemon) stop() int {
	d.once.Do(func() { d.cancel(); d.exit = <-d.code })
	return d.exit
}

// startMain runs Main with HOME=home until it reports readiness.
func startMain(t *testing.T, home string) *daemon {
	t.Helper()
	env := map[string]string{"HOME": home, TokenEnv: testToken, ListenEnv: "127.0.0.1:0"}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Main owns (and closes) the readiness fd: hand it a duplicate.
	fd, err := syscall.Dup(int(w.Fd()))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{stderr: &runnertest.SyncBuffer{}, cancel: cancel, code: make(chan int, 1)}
	go func() {
		d.code <- Main(ctx, []string{"--runner-version", "v9", fmt.Sprintf("--ready-fd=%d", fd)},
			func(k string) string { return env[k] }, io.Discard, d.stderr)
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		cancel()
		t.Fatalf("readiness line %q, %v; exit %d; stderr:\n%s", line, err, <-d.code, d.stderr.String())
	}
	t.Cleanup(func() { d.stop() })
	addr, err := os.ReadFile(filepath.Join(home, ".runner-sandboxd", "sandboxd.addr"))
	if err != nil {
		t.Fatal(err)
	}
	d.addr = string(addr)
	return d
}

// lockable reports whether an flock on path can be taken now (and drops it).
func lockable(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}
