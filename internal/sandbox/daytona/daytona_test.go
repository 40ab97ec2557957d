package daytona_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// TestMain lets the test binary serve as the daemon binary: the fake
// runs what the provider uploads, and this binary answers `sandboxd …`
// as `runner sandboxd …` does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "sandboxd" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := sandboxd.Main(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "channel-echo" {
		os.Exit(channelEcho())
	}
	goleak.VerifyTestMain(m, leaktest.Global()...)
}

// channelEcho plays the tool relay inside a sandbox: it opens the channel
// "tools" to the runner, says hello, and prints the runner's answer.
func channelEcho() int {
	conn, err := sandboxd.Dial(context.Background(), os.Getenv(sandboxd.SocketEnv), "tools")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	io.WriteString(conn, "hello from inside\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// instantClock makes every wait return at once; the fake's transitions
// count polls, not time, so nothing depends on timing.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Now() }
func (instantClock) After(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Now()
	return c
}

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}

func newProvider(tb testing.TB, fake *daytonatest.Server, mod func(*daytona.Config)) *daytona.Provider {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cfg := daytona.Config{
		APIKey:       fake.APIKey(),
		APIURL:       fake.APIURL(),
		DaemonBinary: exe,
		Version:      "test-1",
		RunnerID:     "runner-test",
		Clock:        instantClock{},
	}
	if mod != nil {
		mod(&cfg)
	}
	var logger *slog.Logger
	if t, ok := tb.(*testing.T); ok {
		logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	p, err := daytona.New(cfg, logger)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func create(t *testing.T, p *daytona.Provider, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

// echo starts cat in sb, sends line and checks it comes back.
func echo(t *testing.T, sb sandbox.Sandbox, line string) {
	t.Helper()
	if err := roundTrip(t.Context(), sb, line); err != nil {
		t.Fatal(err)
	}
}

// roundTrip is echo for any goroutine.
func roundTrip(ctx context.Context, sb sandbox.Sandbox, line string) error {
	proc, err := sb.Start(ctx, sandbox.Cmd{Path: "cat", Env: testEnv})
	if err != nil {
		return err
	}
	defer proc.Kill()
	if _, err := io.WriteString(proc.Stdin(), line+"\n"); err != nil {
		return err
	}
	out := bufio.NewReader(proc.Stdout())
	got, err := out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if got != line+"\n" {
		return fmt.Errorf("cat echoed %q, want %q", got, line)
	}
	if err := proc.Stdin().Close(); err != nil {
		return err
	}
	if rest, err := io.ReadAll(out); err != nil || len(rest) > 0 {
		return fmt.Errorf("after closing stdin: %q, %v; want EOF", rest, err)
	}
	if err := proc.Wait(); err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	return nil
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Provider {
		return newProvider(t, daytonatest.New(t, daytonatest.Options{}), nil)
	})
}

func TestCreateRunDestroy(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{TransitionPolls: 2})
	p := newProvider(t, fake, nil)
	sb := create(t, p, sandbox.Spec{SessionID: "sess-1", ProjectID: "proj-1", Labels: map[string]string{"team": "a"}})

	info := sb.Info()
	st, ok := fake.Sandbox(info.ID)
	if !ok {
		t.Fatalf("the fake has no sandbox %s", info.ID)
	}
	for k, want := range map[string]string{"runner.session": "sess-1", "runner.project": "proj-1", "runner.id": "runner-test", "team": "a"} {
		if st.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, st.Labels[k], want)
		}
	}
	if info.Provider != "daytona" || info.Isolation != "daytona" || info.Home != filepath.Join(st.Root, "home") {
		t.Errorf("Info = %+v", info)
	}
	if st.NetworkBlockAll || st.NetworkAllowList != "" {
		t.Errorf("network = %+v, want open", st)
	}

	echo(t, sb, "hello from the sandbox")

	var ee *sandbox.ExitError
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "sh", Args: []string{"-c", "echo bad >&2; exit 7"}, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, proc.Stdout())
	if err := proc.Wait(); !errors.As(err, &ee) || ee.Code != 7 {
		t.Errorf("Wait = %v, want exit 7", err)
	}
	if proc.StderrTail() != "bad" {
		t.Errorf("StderrTail = %q", proc.StderrTail())
	}

	path := filepath.Join(info.Workdir, "dir", "f.txt")
	if err := sb.WriteFile(t.Context(), path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Errorf("file = %q, %v", b, err)
	}
	if err := sb.WriteFile(t.Context(), "/etc/passwd", nil, 0o644); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("WriteFile outside the sandbox dirs = %v, want ErrInvalid", err)
	}

	// A fresh sandbox lacks the binary: the first start says so, the
	// binary is uploaded, the second start runs it.
	for route, want := range map[string]int{"POST /api/sandbox": 1, "POST /toolbox/{id}/files/upload": 1, "POST /toolbox/{id}/process/execute": 2} {
		if n := fake.Count(route); n != want {
			t.Errorf("%s called %d times, want %d", route, n, want)
		}
	}

	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("second Destroy = %v, want nil", err)
	}
	if n := fake.Count("DELETE /api/sandbox/{id}"); n != 1 {
		t.Errorf("delete called %d times, want 1", n)
	}
	if _, err := p.Open(t.Context(), info.ID, sandbox.Spec{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open after Destroy = %v, want ErrNotFound", err)
	}
}

func TestChannelFromSandbox(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	sb := create(t, newProvider(t, fake, nil), sandbox.Spec{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The fake's sandboxes share the host's filesystem, so the test binary
	// can be started in place.
	env := append(append([]string{"GORACE=atexit_sleep_ms=0"}, testEnv...), sb.(*daytona.Sandbox).ChannelEnv()...)
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: exe, Args: []string{"channel-echo"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := sb.(*daytona.Sandbox).Accept(t.Context(), "tools")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(ch.Stdout()).ReadString('\n')
	if err != nil || line != "hello from inside\n" {
		t.Fatalf("runner read %q, %v", line, err)
	}
	if _, err := io.WriteString(ch.Stdin(), "pong\n"); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(proc.Stdout())
	if err != nil || string(out) != "pong\n" {
		t.Errorf("the process printed %q, %v; want pong", out, err)
	}
	if err := proc.Wait(); err != nil {
		t.Errorf("Wait = %v (stderr %q)", err, proc.StderrTail())
	}
	ch.Kill()
	ch.Wait()
}

func TestConcurrentProcessesAndLargeOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("moves large outputs through the fake Daytona API: skipped under -short")
	}
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	sb := create(t, newProvider(t, fake, nil), sandbox.Spec{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := roundTrip(t.Context(), sb, fmt.Sprintf("process %d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	// 6 MiB: several acknowledgements, and more than fits in the daemon's
	// buffer at once if the reader did not acknowledge.
	wg.Go(func() {
		proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "sh", Args: []string{"-c", "head -c 6291456 /dev/zero"}, Env: testEnv})
		if err != nil {
			t.Error(err)
			return
		}
		n, err := io.Copy(io.Discard, proc.Stdout())
		if err != nil || n != 6<<20 {
			t.Errorf("read %d bytes, %v; want %d", n, err, 6<<20)
		}
		if err := proc.Wait(); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
}

func TestPauseThenOpen(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{TransitionPolls: 3})
	p := newProvider(t, fake, nil)
	sb := create(t, p, sandbox.Spec{SessionID: "s"})
	id := sb.Info().ID

	if err := sb.(sandbox.Pauser).Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st, _ := fake.Sandbox(id); st.State != "stopped" {
		t.Fatalf("state after Pause = %s, want stopped", st.State)
	}
	if n := fake.Count("POST /api/sandbox/{id}/stop"); n != 1 {
		t.Errorf("stop called %d times, want 1", n)
	}
	if n := fake.Count("DELETE /api/sandbox/{id}"); n != 0 {
		t.Errorf("Pause deleted the sandbox")
	}

	fake.ResetCalls()
	sb2, err := p.Open(t.Context(), id, sandbox.Spec{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"POST /api/sandbox":                       0,
		"POST /api/sandbox/{id}/start":            1,
		"POST /api/sandbox/{id}/network-settings": 0,
		"POST /toolbox/{id}/files/upload":         0, // this version is there already
		"POST /toolbox/{id}/process/execute":      1, // the daemon, restarted
	}
	got := map[string]int{}
	for route := range want {
		got[route] = fake.Count(route)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls of Open after Pause (-want +got):\n%s\nall calls: %v", diff, fake.Calls())
	}
	// And nothing else: the ladder's resume is these calls, in this order.
	var seq []string
	for _, c := range fake.Calls() {
		if !strings.HasPrefix(c.Route, "/preview/") {
			seq = append(seq, c.String())
		}
	}
	wantSeq := []string{
		"GET /api/sandbox/{id}", // stopped
		"POST /api/sandbox/{id}/start",
		"GET /api/sandbox/{id}", "GET /api/sandbox/{id}", "GET /api/sandbox/{id}", // starting… started (3 polls)
		"GET /api/sandbox/{id}/ports/{port}/signed-preview-url",
		"POST /toolbox/{id}/process/execute",
	}
	if diff := cmp.Diff(wantSeq, seq); diff != "" {
		t.Errorf("Open after Pause calls (-want +got):\n%s", diff)
	}
	if sb2.Info() != sb.Info() {
		t.Errorf("Info changed across pause: %+v, then %+v", sb.Info(), sb2.Info())
	}
	echo(t, sb2, "after resume")
}

func TestOpenRunningReusesDaemon(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	p := newProvider(t, fake, nil)
	sb := create(t, p, sandbox.Spec{})

	// A new provider stands for a restarted runner: nothing in memory.
	fake.ResetCalls()
	sb2, err := newProvider(t, fake, nil).Open(t.Context(), sb.Info().ID, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"POST /api/sandbox", "POST /api/sandbox/{id}/start", "POST /toolbox/{id}/process/execute", "POST /toolbox/{id}/files/upload"} {
		if n := fake.Count(route); n != 0 {
			t.Errorf("%s called %d times, want 0; calls: %v", route, n, fake.Calls())
		}
	}
	echo(t, sb2, "reused")
}

func TestOpenRestartsDaemon(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	sb := create(t, newProvider(t, fake, nil), sandbox.Spec{})

	// The daemon died (OOM, a stray kill) while the sandbox kept running.
	killed := 0
	for _, p := range fake.Processes(sb.Info().ID) {
		if strings.Contains(p.Args, " sandboxd ") {
			if err := syscall.Kill(p.HostPID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d daemons, want 1; processes: %+v", killed, fake.Processes(sb.Info().ID))
	}
	fake.ResetCalls()
	sb2, err := newProvider(t, fake, nil).Open(t.Context(), sb.Info().ID, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if n := fake.Count("POST /toolbox/{id}/process/execute"); n != 1 {
		t.Errorf("execute called %d times, want 1 (restart, binary present)", n)
	}
	if n := fake.Count("POST /api/sandbox/{id}/start"); n != 0 {
		t.Errorf("start called %d times for a running sandbox", n)
	}
	echo(t, sb2, "after daemon restart")

	// A runner with another token key cannot use the daemon: it replaces it.
	fake.ResetCalls()
	sb3, err := newProvider(t, fake, func(c *daytona.Config) { c.TokenKey = []byte("rotated") }).Open(t.Context(), sb.Info().ID, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if n := fake.Count("POST /toolbox/{id}/process/execute"); n != 1 {
		t.Errorf("execute called %d times after a key change, want 1", n)
	}
	echo(t, sb3, "after token change")
}

func TestOpenUpgradesDaemon(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	sb := create(t, newProvider(t, fake, nil), sandbox.Spec{})

	fake.ResetCalls()
	p2 := newProvider(t, fake, func(c *daytona.Config) { c.Version = "test-2" })
	sb2, err := p2.Open(t.Context(), sb.Info().ID, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if n := fake.Count("POST /toolbox/{id}/files/upload"); n != 1 {
		t.Errorf("upload called %d times, want 1 for a new version", n)
	}
	if n := fake.Count("POST /toolbox/{id}/process/execute"); n != 2 {
		t.Errorf("execute called %d times, want 2 (missing binary, then start)", n)
	}
	echo(t, sb2, "upgraded")
}

func TestOpenGoneOrFailed(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	p := newProvider(t, fake, nil)

	gone := create(t, p, sandbox.Spec{})
	fake.Remove(gone.Info().ID)
	if _, err := p.Open(t.Context(), gone.Info().ID, sandbox.Spec{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open of a deleted sandbox = %v, want ErrNotFound", err)
	}
	if _, err := p.Open(t.Context(), "no-such-id", sandbox.Spec{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open of an unknown id = %v, want ErrNotFound", err)
	}

	failed := create(t, p, sandbox.Spec{})
	fake.Fail(failed.Info().ID, "disk quota exceeded")
	_, err := p.Open(t.Context(), failed.Info().ID, sandbox.Spec{})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Open of a failed sandbox = %v, want ErrConflict", err)
	}
	for _, want := range []string{failed.Info().ID, "error", "disk quota exceeded"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
}

func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	p := newProvider(t, fake, nil)
	sb := create(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
	id := sb.Info().ID
	if st, _ := fake.Sandbox(id); !st.NetworkBlockAll {
		t.Fatalf("created with mode off: %+v, want networkBlockAll", st)
	}

	steps := []struct {
		name  string
		net   sandbox.Network
		calls int
		want  daytonatest.SandboxState
	}{
		{"same policy", sandbox.Network{Mode: "off"}, 0, daytonatest.SandboxState{NetworkBlockAll: true}},
		{"allowlist", sandbox.Network{Mode: "allowlist", Allow: []string{"10.1.2.3", "192.168.0.0/16", "api.example.com"}}, 1,
			daytonatest.SandboxState{NetworkAllowList: "10.1.2.3/32,192.168.0.0/16", DomainAllowList: "api.example.com"}},
		{"same allowlist reordered", sandbox.Network{Mode: "allowlist", Allow: []string{"api.example.com", "192.168.0.0/16", "10.1.2.3/32"}}, 0,
			daytonatest.SandboxState{NetworkAllowList: "10.1.2.3/32,192.168.0.0/16", DomainAllowList: "api.example.com"}},
		{"open", sandbox.Network{}, 1, daytonatest.SandboxState{}},
		{"empty allowlist blocks", sandbox.Network{Mode: "allowlist"}, 1, daytonatest.SandboxState{NetworkBlockAll: true}},
	}
	for _, step := range steps {
		fake.ResetCalls()
		if _, err := p.Open(t.Context(), id, sandbox.Spec{Network: step.net}); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if n := fake.Count("POST /api/sandbox/{id}/network-settings"); n != step.calls {
			t.Errorf("%s: network-settings called %d times, want %d", step.name, n, step.calls)
		}
		st, _ := fake.Sandbox(id)
		got := daytonatest.SandboxState{NetworkBlockAll: st.NetworkBlockAll, NetworkAllowList: st.NetworkAllowList, DomainAllowList: st.DomainAllowList}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("%s: network (-want +got):\n%s", step.name, diff)
		}
	}

	for _, bad := range [][]string{{"example.com:443"}, {"::1"}, {"2001:db8::/32"}} {
		if _, err := p.Open(t.Context(), id, sandbox.Spec{Network: sandbox.Network{Mode: "allowlist", Allow: bad}}); !errors.Is(err, errdefs.ErrUnprocessable) {
			t.Errorf("allowlist %v: %v, want ErrUnprocessable", bad, err)
		}
	}
}

func TestStdoutSurvivesProxyDisconnect(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{StrictCookies: true})
	p := newProvider(t, fake, nil)
	sb := create(t, p, sandbox.Spec{})
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "cat", Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(proc.Stdout())
	for i, line := range []string{"one\n", "two\n", "three\n"} {
		if i > 0 {
			// Only the stdout stream is open between lines.
			if n := fake.DropConnections(sb.Info().ID); n == 0 {
				t.Fatalf("no live proxy connection to drop before line %d", i)
			}
		}
		if _, err := io.WriteString(proc.Stdin(), line); err != nil {
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
	proc.Kill()
	proc.Wait()
}

func TestRetries(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	p := newProvider(t, fake, nil)

	fake.FailNext("POST /api/sandbox", http.StatusServiceUnavailable, http.StatusTooManyRequests)
	fake.FailNext("GET /api/sandbox/{id}", http.StatusBadGateway, http.StatusGatewayTimeout)
	sb := create(t, p, sandbox.Spec{})
	if n := fake.Count("POST /api/sandbox"); n != 3 {
		t.Errorf("create called %d times, want 3 (two refusals, then success)", n)
	}
	if got := len(listed(fake)); got != 1 {
		t.Errorf("the fake holds %d sandboxes, want 1", got)
	}
	echo(t, sb, "after retries")

	// A create whose answer is lost must not make a second sandbox.
	fake.ResetCalls()
	fake.LoseNext("POST /api/sandbox", http.StatusBadGateway)
	sb2 := create(t, p, sandbox.Spec{SessionID: "lost-answer"})
	if n := fake.Count("POST /api/sandbox"); n != 1 {
		t.Errorf("create called %d times after a lost answer, want 1 (then found by label)", n)
	}
	if n := fake.Count("GET /api/sandbox"); n != 1 {
		t.Errorf("list called %d times, want 1", n)
	}
	if st, _ := fake.Sandbox(sb2.Info().ID); st.Labels["runner.session"] != "lost-answer" {
		t.Errorf("found sandbox has labels %v", st.Labels)
	}

	// A refusal that is not "not now" fails at once, with the API's message.
	fake.ResetCalls()
	fake.FailNext("POST /api/sandbox/{id}/stop", http.StatusBadRequest)
	err := sb.(sandbox.Pauser).Pause(t.Context())
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "injected failure") || !strings.Contains(err.Error(), sb.Info().ID) || !strings.Contains(err.Error(), "state started") {
		t.Errorf("Pause with a 400 = %v, want ErrInvalid naming the message, the sandbox and its state", err)
	}
	if n := fake.Count("POST /api/sandbox/{id}/stop"); n != 1 {
		t.Errorf("stop called %d times after a 400, want 1", n)
	}
}

// listed returns the ids of the sandboxes the fake holds.
func listed(fake *daytonatest.Server) []string {
	var ids []string
	for _, c := range fake.Calls() {
		if c.String() == "POST /api/sandbox" {
			continue
		}
		if id, ok := strings.CutPrefix(c.Path, "/api/sandbox/"); ok {
			id, _, _ = strings.Cut(id, "/")
			if _, ok := fake.Sandbox(id); ok && !contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func TestCreateRefused(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	p := newProvider(t, fake, func(c *daytona.Config) { c.APIKey = "wrong" })
	_, err := p.Create(t.Context(), sandbox.Spec{})
	if !errors.Is(err, errdefs.ErrUnauthorized) || !strings.Contains(err.Error(), "Invalid credentials") {
		t.Errorf("Create with a wrong key = %v, want ErrUnauthorized with the API's message", err)
	}
	if n := fake.Count("POST /api/sandbox"); n != 1 {
		t.Errorf("create called %d times, want 1 (401 is not retried)", n)
	}

	p = newProvider(t, fake, nil)
	if _, err := p.Create(t.Context(), sandbox.Spec{Binds: []sandbox.Bind{{Path: "/usr/bin/runner"}}}); !errors.Is(err, errdefs.ErrUnprocessable) {
		t.Errorf("Create with binds = %v, want ErrUnprocessable", err)
	}
}

func TestCreateFailureDeletesSandbox(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	p := newProvider(t, fake, nil)
	fake.FailNext("POST /toolbox/{id}/process/execute", http.StatusBadRequest)
	if _, err := p.Create(t.Context(), sandbox.Spec{}); err == nil {
		t.Fatal("Create succeeded although the daemon could not start")
	}
	if n := fake.Count("DELETE /api/sandbox/{id}"); n != 1 {
		t.Errorf("delete called %d times, want 1: a failed create must not leak its sandbox", n)
	}
}

func TestListAndRemove(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	p := newProvider(t, fake, nil)
	other := newProvider(t, fake, func(c *daytona.Config) { c.RunnerID = "someone-else" })
	mine := create(t, p, sandbox.Spec{SessionID: "s1"})
	create(t, other, sandbox.Spec{})
	if err := mine.(sandbox.Pauser).Pause(t.Context()); err != nil {
		t.Fatal(err)
	}

	got, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != mine.Info().ID || got[0].State != "stopped" || got[0].Labels["runner.session"] != "s1" {
		t.Fatalf("List = %+v, want only the parked sandbox of this runner", got)
	}

	fake.ResetCalls()
	if err := p.Remove(t.Context(), mine.Info().ID); err != nil {
		t.Fatal(err)
	}
	if n := fake.Count("POST /api/sandbox/{id}/start"); n != 0 {
		t.Errorf("Remove started the parked sandbox")
	}
	if err := p.Remove(t.Context(), "no-such-id"); err != nil {
		t.Errorf("Remove of an unknown id = %v, want nil", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := daytona.New(daytona.Config{Snapshot: "a", Image: "b"}, nil)
	for _, want := range []string{"API key", "not both", "version", "daemon binary"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error %v does not mention %q", err, want)
		}
	}
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("New error %v is not ErrInvalid", err)
	}
}
