package runner_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/sandbox/egress"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/pool/pooltest"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/sandboxd"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlite"
	"github.com/agentrunner/runner/internal/tools/relay"
	"github.com/agentrunner/runner/internal/wire"
)

// maybeRemote makes the test binary answer as the runner binary does
// inside a remote sandbox: `sandboxd` (the daemon the fake Daytona runs)
// and `mcp-stdio` over the daemon's channel.
func maybeRemote() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case "sandboxd":
		os.Exit(sandboxd.Main(context.Background(), os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	case "channel-forward":
		os.Exit(sandboxd.ForwardMain(context.Background(), os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	case "mcp-stdio":
		conn, err := sandboxd.Dial(context.Background(), os.Getenv(sandboxd.SocketEnv), "tools")
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		if err := relay.Client(context.Background(), conn, os.Getenv(relay.EnvToken), os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

type instant struct{}

func (instant) Now() time.Time { return time.Now() }
func (instant) After(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Now()
	return c
}

type remoteEnv struct {
	fake  *daytonatest.Server
	svc   *runner.Service
	st    store.Store
	clock *pooltest.Clock
	dir   string
}

// newRemoteEnv is a runner whose default provider is Daytona, served by the
// repository's fake Daytona running real sandboxd processes. st, when
// given, is shared (a restarted runner on the same store).
func newRemoteEnv(t testing.TB, fake *daytonatest.Server, st store.Store, opts ...option) *remoteEnv {
	t.Helper()
	exe, _ := os.Executable()
	prov, err := daytona.New(daytona.Config{APIKey: fake.APIKey(), APIURL: fake.APIURL(), DaemonBinary: exe, Version: "test-1", RunnerID: "replica-a", Clock: instant{}},
		slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if st == nil {
		if st, err = sqlite.Open(t.Context(), filepath.Join(dir, "runner.db")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
	}
	clock := pooltest.NewClock(time.Unix(1_000_000, 0))
	cfg := runner.Config{
		Version: "test", DefaultProvider: "daytona",
		Harnesses:   map[string]agent.Spec{"fake": runnertest.Fake()},
		BaseEnv:     []string{"PATH=/usr/bin:/bin"},
		ReplicaID:   "replica-a",
		ApprovalTTL: 10 * time.Minute,
		Pools:       map[string]runner.PoolConfig{"daytona": {Enabled: true, Max: 20, IdleTTL: 2 * time.Minute}},
		PoolClock:   clock,
		Logger:      runnertest.Logger(t),
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc := runnertest.Service(t, cfg, []sandbox.Provider{prov}, st)
	return &remoteEnv{fake: fake, svc: svc, st: st, clock: clock, dir: dir}
}

func (e *remoteEnv) turn(t *testing.T, w *wire.Request) turnResult {
	t.Helper()
	return collect(t, e.svc, w)
}

const (
	routeCreate = "POST /api/sandbox"
	routeStart  = "POST /api/sandbox/{id}/start"
	routeStop   = "POST /api/sandbox/{id}/stop"
	routeDelete = "DELETE /api/sandbox/{id}"
	routeNet    = "POST /api/sandbox/{id}/network-settings"
)

func TestDaytonaLadder(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	msgs := []string{"say remember otter\npid"}

	// Cold: one create.
	first := e.turn(t, req{session: "s", messages: msgs}.wire())
	if !first.res.OK || fake.Count(routeCreate) != 1 {
		t.Fatalf("cold turn: %+v, creates %d", first.res, fake.Count(routeCreate))
	}
	// Warm: same harness, no API call that creates or starts.
	msgs = append(msgs, first.res.Output, "pid")
	warm := e.turn(t, req{session: "s", messages: msgs}.wire())
	if warm.mode != "warm" || warm.pid != first.pid || fake.Count(routeCreate) != 1 || fake.Count(routeStart) != 0 {
		t.Fatalf("warm turn: mode %q pid %s/%s creates %d starts %d", warm.mode, first.pid, warm.pid, fake.Count(routeCreate), fake.Count(routeStart))
	}
	// Idle TTL: the sandbox is parked (stopped), never deleted.
	e.clock.Advance(3 * time.Minute)
	waitFor(t, func() bool { return fake.Count(routeStop) == 1 })
	if fake.Count(routeDelete) != 0 {
		t.Fatalf("park: stops %d deletes %d", fake.Count(routeStop), fake.Count(routeDelete))
	}
	// Resume from stopped: one start, no create, the native session reloaded.
	msgs = append(msgs, warm.res.Output, "history")
	resumed := e.turn(t, req{session: "s", messages: msgs}.wire())
	if fake.Count(routeStart) != 1 || fake.Count(routeCreate) != 1 || resumed.mode != "load" {
		t.Fatalf("resume: mode %q starts %d creates %d", resumed.mode, fake.Count(routeStart), fake.Count(routeCreate))
	}
	if !strings.Contains(resumed.res.Output, "remember otter") {
		t.Errorf("reloaded session lost the first turn: %q", resumed.res.Output)
	}
	// Gone: a fresh sandbox, history replayed.
	sess, _ := e.st.GetSession(t.Context(), sk("s"))
	e.svc.Kill(t.Context(), "s", "p") // release the warm one (kill deletes)
	if fake.Count(routeDelete) != 1 {
		t.Fatalf("kill must delete: deletes %d", fake.Count(routeDelete))
	}
	fake.Remove(sess.SandboxID)
	msgs = append(msgs, resumed.res.Output, "say again")
	fresh := e.turn(t, req{session: "s", messages: msgs}.wire())
	if fake.Count(routeCreate) != 2 || fresh.mode != "replay" || !strings.Contains(fresh.res.Output, "again") {
		t.Fatalf("after delete: mode %q creates %d out %q", fresh.mode, fake.Count(routeCreate), fresh.res.Output)
	}
}

func TestDaytonaNetworkPolicyChange(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	first := req{session: "s", messages: []string{"say hi"}}.wire()
	e.turn(t, first)
	e.clock.Advance(3 * time.Minute) // park
	waitFor(t, func() bool { return e.svc.Warm() == 0 })
	second := req{session: "s", messages: []string{"say hi", "hi", "say again"}}.wire()
	second.SandboxPermission = &wire.SandboxPermission{Network: &wire.NetworkPermission{Mode: "off"}}
	fake.ResetCalls()
	r := e.turn(t, second)
	if !r.res.OK || fake.Count(routeNet) != 1 || fake.Count(routeCreate) != 0 {
		t.Fatalf("policy change: ok %v network updates %d creates %d", r.res.OK, fake.Count(routeNet), fake.Count(routeCreate))
	}
}

func TestDaytonaConcurrentTurnsCreateOnce(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.svc.Run(context.Background(), req{session: "s", messages: []string{"say hi\nsleep 200ms"}}.wire(), nil)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !strings.Contains(err.Error(), "in flight") {
			t.Errorf("unexpected error %v", err)
		}
	}
	if ok < 1 || fake.Count(routeCreate) != ok {
		t.Fatalf("%d turns ran, %d creates", ok, fake.Count(routeCreate))
	}
}

func TestDaytonaRestartReusesParkedSandbox(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	e.turn(t, req{session: "s", messages: []string{"say one"}}.wire())
	if err := e.svc.Shutdown(t.Context()); err != nil { // parks (stops) the warm sandbox
		t.Fatal(err)
	}
	if fake.Count(routeDelete) != 0 {
		t.Fatalf("shutdown deleted a resumable sandbox")
	}
	again := newRemoteEnv(t, fake, e.st)
	if _, err := again.svc.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := again.turn(t, req{session: "s", messages: []string{"say one", "one", "history"}}.wire())
	if fake.Count(routeCreate) != 1 || r.mode != "load" || !strings.Contains(r.res.Output, "say one") {
		t.Fatalf("after restart: creates %d mode %q out %q", fake.Count(routeCreate), r.mode, r.res.Output)
	}
}

func TestDaytonaToolCallOverTheChannel(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	cb := newCallback(t, func(w http.ResponseWriter, body map[string]any) {
		_ = json.NewEncoder(w).Encode(map[string]any{"result": "from the runner side"})
	})
	e := newRemoteEnv(t, fake, nil, withTools(t))
	res, err := e.svc.Run(t.Context(), toolReq("s", `mcp agenta-tools lookup {"q":"x"}`, cb.srv.URL), nil)
	if err != nil || !strings.Contains(res.Output, "from the runner side") {
		t.Fatalf("tool over the Daytona channel: %q %v", res.Output, err)
	}
}

func TestDaytonaRefusesCredentialsItCannotHide(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil, func(c *runner.Config) {
		c.SecretRefusal = map[string]string{"daytona": "secret hiding unavailable; set AGENTA_RUNNER_DAYTONA_OPAQUE_SECRETS=off"}
	})
	_, err := e.svc.Run(t.Context(), req{session: "s", key: "sk-1", messages: []string{"hi"}}.wire(), nil)
	if err == nil || !strings.Contains(err.Error(), "OPAQUE_SECRETS") || fake.Count(routeCreate) != 0 {
		t.Fatalf("err %v, creates %d", err, fake.Count(routeCreate))
	}
}

// TestDaytonaKeysStayOutOfTheSandbox: on a remote sandbox the harness gets
// a placeholder key and a loopback base URL served by the in-sandbox
// forward, which reaches the runner's key gateway over the daemon's
// channel; the model sees the real key.
func TestDaytonaKeysStayOutOfTheSandbox(t *testing.T) {
	var auth []string
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer model.Close()
	// The test's model server is on loopback: the operator opens it.
	eg, err := egress.New([]string{model.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(nil, eg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // a free port for the in-sandbox forward
	fwd := ln.Addr().String()
	ln.Close()
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil, func(c *runner.Config) {
		c.Gateway, c.ModelForwardAddr, c.Egress = g, fwd, eg
		c.SecretRefusal = map[string]string{"daytona": "refused"}
		c.Tools.Base.HostAllowlist = []string{"mcp.example.com"} // no DNS in tests
	})
	w := req{session: "s", messages: []string{"env\nhttp OPENAI_BASE_URL OPENAI_API_KEY /models"}}.wire()
	w.ModelConnection = &wire.ModelConnection{Provider: "openai", Deployment: "direct",
		Endpoint:    &wire.Endpoint{BaseURL: model.URL + "/v1"},
		Environment: map[string]string{"OPENAI_BASE_URL": model.URL + "/v1"},
		Credentials: []wire.Credential{{Binding: wire.Binding{Kind: "environment", Name: "OPENAI_API_KEY"}, Value: "sk-remote-secret", Usage: "opaque_http"}}}
	r := e.turn(t, w)
	out := r.res.Output
	if strings.Contains(out, "sk-remote-secret") || !strings.Contains(out, "OPENAI_BASE_URL=http://"+fwd+"/g/") || !strings.Contains(out, `http 200 {"ok":true}`) {
		t.Fatalf("output:\n%s", out)
	}
	if len(auth) != 1 || auth[0] != "Bearer sk-remote-secret" {
		t.Fatalf("model saw %v", auth)
	}
	// A credential the gateway cannot hide is still refused.
	w2 := req{session: "s2", messages: []string{"hi"}}.wire()
	w2.MCPServers = []wire.MCPServer{{Name: "m", Connection: wire.MCPConnection{Type: "http", URL: "https://mcp.example.com", Credentials: []wire.Credential{{Binding: wire.Binding{Kind: "header", Name: "Authorization"}, Value: "x", Usage: "opaque_http"}}}}}
	if _, err := e.svc.Run(t.Context(), w2, nil); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("MCP credentials on Daytona: %v", err)
	}
}
