package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd"
)

const testToken = "secret-token"

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}

func noSleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// newTestServer serves a daemon over httptest; cfg.Token defaults to testToken.
func newTestServer(t *testing.T, cfg sandboxd.Config) (*sandboxd.Server, *httptest.Server) {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.Workdir == "" {
		cfg.Workdir = t.TempDir()
	}
	srv, err := sandboxd.NewServer(cfg)
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

func newTestClient(hs *httptest.Server, mod func(*Config)) *Client {
	cfg := Config{BaseURL: hs.URL, Token: testToken, HTTPClient: hs.Client(), Sleep: noSleep}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg)
}

func TestProcessRoundTrip(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{Version: "v1"})
	c := newTestClient(hs, nil)
	ctx := t.Context()

	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || h.Version != "v1" {
		t.Errorf("health = %+v, want ok v1", h)
	}

	p, err := c.Start(ctx, sandboxd.StartRequest{Argv: []string{"cat"}, Env: testEnv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(p.Stdout())
	for _, line := range []string{"hello\n", "second line\n"} {
		if _, err := io.WriteString(p.Stdin(), line); err != nil {
			t.Fatal(err)
		}
		got, err := out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if got != line {
			t.Errorf("read %q, want %q", got, line)
		}
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
		t.Errorf("after close: %q, %v; want EOF", rest, err)
	}
	if err := p.Wait(); err != nil {
		t.Errorf("Wait = %v, want nil", err)
	}
}

func TestExitStatusAndStderr(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	p, err := c.Start(t.Context(), sandboxd.StartRequest{Argv: []string{"sh", "-c", "echo out; echo oops >&2; exit 3"}, Env: testEnv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "out\n" {
		t.Errorf("stdout = %q", b)
	}
	err = p.Wait()
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("Wait = %v, want exit code 3", err)
	}
	if got := p.StderrTail(); got != "oops" {
		t.Errorf("StderrTail = %q, want oops", got)
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	// The child sleeps in a grandchild, to check the whole group goes.
	p, err := c.Start(t.Context(), sandboxd.StartRequest{Argv: []string{"sh", "-c", "sleep 1000; echo never"}, Env: testEnv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("second Kill = %v, want nil", err)
	}
	b, _ := io.ReadAll(p.Stdout())
	if len(b) != 0 {
		t.Errorf("stdout = %q, want nothing", b)
	}
	var ee *sandbox.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Signal != "SIGKILL" {
		t.Errorf("Wait = %v, want killed by SIGKILL", err)
	}
}

func TestStartContextCancelKills(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	ctx, cancel := context.WithCancel(t.Context())
	p, err := c.Start(ctx, sandboxd.StartRequest{Argv: []string{"cat"}, Env: testEnv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	var ee *sandbox.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Code != -1 {
		t.Errorf("Wait = %v, want killed", err)
	}
}

func TestStartUnknownProgram(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	_, err := c.Start(t.Context(), sandboxd.StartRequest{Argv: []string{"no-such-program-xyz"}, Env: testEnv}, 0)
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Start = %v, want ErrInvalid", err)
	}
}

func TestWrongToken(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, func(cfg *Config) { cfg.Token = "wrong" })
	_, err := c.Health(t.Context())
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized || se.FromProxy {
		t.Errorf("Health with a wrong token = %v, want 401 from the daemon", err)
	}
	if !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Errorf("error %v is not ErrUnauthorized", err)
	}
	// Both header spellings are accepted.
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/health", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("Bearer token: status %d, want 200", resp.StatusCode)
	}
}

// TestInputRetryAppliesOnce replays a write whose answer was "lost".
func TestInputRetryAppliesOnce(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	p, err := c.Start(t.Context(), sandboxd.StartRequest{Argv: []string{"cat"}, Env: testEnv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	post := func(off, body string) int {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/entries/"+p.ID()+"/input?offset="+off, strings.NewReader(body))
		req.Header.Set("X-Sandboxd-Token", testToken)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, step := range []struct {
		off, body string
		want      int
	}{
		{"0", "abc", 200},
		{"0", "abc", 200},   // a retry of the same write
		{"1", "bcdef", 200}, // overlaps: only "def" is new
		{"9", "x", 409},     // a gap
	} {
		if got := post(step.off, step.body); got != step.want {
			t.Errorf("input at %s %q: status %d, want %d", step.off, step.body, got, step.want)
		}
	}
	p.stdin.off = 6
	p.Stdin().Close()
	b, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "abcdef" {
		t.Errorf("process read %q, want abcdef", b)
	}
	p.Wait()
}

// cuttingTransport breaks every event stream after limit bytes, the first
// cuts times, as a proxy dropping connections would.
type cuttingTransport struct {
	base  http.RoundTripper
	limit int

	mu   sync.Mutex
	cuts int
}

func (t *cuttingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/events") {
		return resp, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cuts == 0 {
		return resp, nil
	}
	t.cuts--
	resp.Body = &cutBody{ReadCloser: resp.Body, left: t.limit}
	return resp, nil
}

type cutBody struct {
	io.ReadCloser
	left int
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= n
	return n, err
}

func TestStdoutSurvivesDroppedConnections(t *testing.T) {
	t.Parallel()
	// A small buffer and frequent acks also exercise back-pressure: the
	// process must stall, not lose output, while the reader is away.
	_, hs := newTestServer(t, sandboxd.Config{MaxBuffer: 4096})
	tr := &cuttingTransport{base: hs.Client().Transport, limit: 700, cuts: 20}
	c := newTestClient(hs, func(cfg *Config) {
		cfg.HTTPClient = &http.Client{Transport: tr}
		cfg.AckEvery = 1024
	})
	script := `i=1; while [ $i -le 3000 ]; do echo "line $i"; i=$((i+1)); done`
	p, err := c.Start(t.Context(), sandboxd.StartRequest{Argv: []string{"sh", "-c", script}, Env: testEnv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if diff := cmp.Diff(want.String(), string(got)); diff != "" {
		t.Errorf("stdout differs (-want +got):\n%s", diff)
	}
	if err := p.Wait(); err != nil {
		t.Errorf("Wait = %v", err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.cuts != 0 {
		t.Errorf("%d cuts unused; the test did not exercise reconnects", tr.cuts)
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	root := t.TempDir()
	path := filepath.Join(root, "a", "b", "file.sh")
	if err := c.WriteFile(t.Context(), root, "a/b/file.sh", []byte("#!/bin/sh\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("mode = %v, want 0750", fi.Mode().Perm())
	}
	b, err := c.ReadFile(t.Context(), root, "a/b/file.sh")
	if err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	if _, err := c.ReadFile(t.Context(), root, "a/b/file.sh.missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ReadFile of a missing file = %v, want ErrNotFound", err)
	}
	if err := c.WriteFile(t.Context(), "relative", "path", nil, 0o644); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("WriteFile under a relative root = %v, want ErrInvalid", err)
	}
	if err := c.WriteFile(t.Context(), root, "../escape", nil, 0o644); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("WriteFile of a path leaving its root = %v, want ErrInvalid", err)
	}
}

// The daemon may run with more rights than the agent's processes: a link
// the agent planted where the runner writes (or reads) next is never
// followed. One at the path is replaced by the file, one among its parents
// is refused; a read through either is refused.
func TestFilesNeverFollowALink(t *testing.T) {
	t.Parallel()
	_, hs := newTestServer(t, sandboxd.Config{})
	c := newTestClient(hs, nil)
	root, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("HOST"), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"AGENTS.md": victim, "read.md": victim, "sub": outside} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WriteFile(t.Context(), root, "AGENTS.md", []byte("RUNNER"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "AGENTS.md")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("AGENTS.md = %v, %v; want a regular file", fi, err)
	}
	if err := c.WriteFile(t.Context(), root, "sub/victim", []byte("RUNNER"), 0o644); err == nil || !strings.Contains(err.Error(), "sub") {
		t.Errorf("write through a linked directory: %v, want a refusal naming sub", err)
	}
	for _, rel := range []string{"read.md", "sub/victim"} {
		if b, err := c.ReadFile(t.Context(), root, rel); err == nil {
			t.Errorf("read %s through a link: %q", rel, b)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "HOST" {
		t.Fatalf("host file = %q, %v; want HOST", b, err)
	}
}

func TestChannel(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "sbd") // short enough for a unix socket's path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	srv, hs := newTestServer(t, sandboxd.Config{Socket: sock})
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	local := &http.Server{Handler: srv.DialHandler()}
	var serving sync.WaitGroup
	serving.Go(func() { local.Serve(ln) })
	t.Cleanup(func() {
		local.Close()
		serving.Wait()
	})

	c := newTestClient(hs, nil)
	ctx := t.Context()
	var inSandbox string
	var dialErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		conn, err := sandboxd.Dial(ctx, sock, "tools")
		if err != nil {
			dialErr = err
			return
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "ping\n"); err != nil {
			dialErr = err
			return
		}
		inSandbox, dialErr = bufio.NewReader(conn).ReadString('\n')
	})
	ch, err := c.Accept(ctx, "tools")
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(ch.Stdout())
	line, err := out.ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("runner read %q, %v; want ping", line, err)
	}
	if _, err := io.WriteString(ch.Stdin(), "pong\n"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if dialErr != nil || inSandbox != "pong\n" {
		t.Errorf("sandbox side read %q, %v; want pong", inSandbox, dialErr)
	}
	if rest, err := io.ReadAll(out); err != nil || len(rest) > 0 {
		t.Errorf("after the sandbox side closed: %q, %v; want EOF", rest, err)
	}
	if err := ch.Wait(); err != nil {
		t.Errorf("channel Wait = %v, want nil after the sandbox side closed", err)
	}
}
