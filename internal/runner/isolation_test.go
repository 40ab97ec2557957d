package runner_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/wire"
)

// bwrapEnv is a runner whose local provider isolates with bubblewrap, as
// in production. CI sets RUNNER_TEST_BWRAP=1, so a missing bwrap fails
// there instead of skipping.
func bwrapEnv(t *testing.T) (*env, string) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("RUNNER_TEST_BWRAP") == "1" {
			t.Fatal("bwrap is required (RUNNER_TEST_BWRAP=1): apt-get install bubblewrap")
		}
		t.Skip("bwrap not installed; apt-get install bubblewrap")
	}
	e := newEnv(t)
	dir := t.TempDir()
	p, err := local.New(local.Config{Dir: filepath.Join(dir, "sandboxes"), DataDir: dir, Isolation: "bwrap",
		MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit, DiskMB: local.NoLimit})
	if err != nil {
		t.Fatalf("bwrap provider: %v", err)
	}
	e.swap(t, p)
	return e, dir
}

// swap rebuilds the env's service over another local provider.
func (e *env) swap(t *testing.T, p sandbox.Provider) {
	t.Helper()
	e2 := newEnvWith(t, []sandbox.Provider{p})
	*e = *e2
}

func TestEscapesUnderBwrap(t *testing.T) {
	e, dataDir := bwrapEnv(t)
	secret := filepath.Join(t.TempDir(), "host-secret.txt")
	if err := os.WriteFile(secret, []byte("hunter2"), 0o644); err != nil {
		t.Fatal(err)
	}
	inData := filepath.Join(dataDir, "runner.db.secret")
	_ = os.WriteFile(inData, []byte("data-dir-secret"), 0o600)
	t.Setenv("AGENTA_RUNNER_TOKEN", "runner-token-must-not-leak")

	// Another session's workspace, created by an earlier turn.
	other := e.turn(t, req{session: "other", messages: []string{"write other.txt theirs\nexec pwd"}})
	otherDir := strings.TrimSpace(strings.SplitN(other.res.Output, "\n", 3)[2])

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()

	script := strings.Join([]string{
		"read " + secret, // outside the workspace: hidden
		"read " + inData, // the runner's data dir: hidden
		"read " + filepath.Join(otherDir, "other.txt"), // another session: hidden
		"write mine.txt ok",                            // control: the workspace is writable
		"read mine.txt",                                // control
		"write /etc/owned nope",                        // outside: read-only
		"exec ps -e -o pid= | wc -l",                   // only its own processes
		"env",
	}, "\n")
	r := e.turn(t, req{session: "s", messages: []string{script}})
	out := r.res.Output
	for _, want := range []string{
		"read error: open " + secret,
		"read error: open " + inData,
		"read error: open " + filepath.Join(otherDir, "other.txt"),
		"write ok", "read ok: ok", "write error: open /etc/owned",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, leak := range []string{"hunter2", "data-dir-secret", "theirs", "runner-token-must-not-leak", "AGENTA_RUNNER"} {
		if strings.Contains(out, leak) {
			t.Errorf("sandbox saw %q:\n%s", leak, out)
		}
	}
	var procs int
	for _, line := range strings.Split(out, "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d", &procs); err == nil && procs > 0 {
			break
		}
	}
	if procs == 0 || procs > 8 {
		t.Errorf("ps inside the sandbox counts %d processes; want only its own", procs)
	}

	// Network off and on: the host loopback is out of reach (on is the
	// internet, never the host); on with the host's network: reachable.
	off := req{session: "net-off", messages: []string{"connect " + addr}}.wire()
	off.SandboxPermission = &wire.SandboxPermission{Network: &wire.NetworkPermission{Mode: "off"}}
	if out := e.runW(t, off); !strings.Contains(out, "connect error") {
		t.Errorf("network off reached the host: %s", out)
	}
	on := req{session: "net-on", messages: []string{"connect " + addr}}.wire()
	if out := e.runW(t, on); !strings.Contains(out, "connect error") {
		t.Errorf("network on reached the host's loopback: %s", out)
	}
	hostNet, err := local.New(local.Config{Dir: filepath.Join(dataDir, "sandboxes-host"), Isolation: "bwrap", Network: local.NetworkHost,
		MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit, DiskMB: local.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	e.swap(t, hostNet)
	on.SessionID = "net-on-host"
	if out := e.runW(t, on); !strings.Contains(out, "connect ok") {
		t.Errorf("control: network on with the host's network could not reach the host: %s", out)
	}
}

func (e *env) runW(t *testing.T, w *wire.Request) string {
	t.Helper()
	res, err := e.svc.Run(t.Context(), w, nil)
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	return res.Output
}

var _ = runner.Config{}

// TestToolCallWithNetworkOff: the tool relay is a unix socket bound into
// the sandbox, so runner tools work even with no network at all.
func TestToolCallWithNetworkOff(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed")
	}
	cb := newCallback(t, func(w http.ResponseWriter, body map[string]any) {
		_ = json.NewEncoder(w).Encode(map[string]any{"result": "offline but served"})
	})
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "bwrap", MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit, DiskMB: local.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, []sandbox.Provider{p}, withTools(t))
	w := toolReq("s", "connect "+strings.TrimPrefix(cb.srv.URL, "http://")+"\nmcp agenta-tools lookup {\"q\":\"x\"}", cb.srv.URL)
	w.SandboxPermission = &wire.SandboxPermission{Network: &wire.NetworkPermission{Mode: "off"}}
	out := e.runW(t, w)
	if !strings.Contains(out, "connect error") || !strings.Contains(out, "offline but served") {
		t.Fatalf("network off: the sandbox must not reach the callback itself, yet its tool call must work:\n%s", out)
	}
}

// TestAllowlistReachesOnlyListedLoopbackServices: under network
// "allowlist" a service on the host's loopback is reachable at its own
// address when the request lists it and the operator opened it
// (AGENTA_RUNNER_LOCAL_NETWORK_ALLOW: a local model server), and nothing
// else is: not one the request alone lists.
func TestAllowlistReachesOnlyListedLoopbackServices(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed")
	}
	exe, _ := os.Executable()
	short, err := os.MkdirTemp("", "rl") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	listen := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	listed, requested, unlisted := listen(), listen(), listen()
	eg, err := egress.New([]string{listed})
	if err != nil {
		t.Fatal(err)
	}
	p, err := local.New(local.Config{Dir: short, Isolation: "bwrap", MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit,
		ProxyBridge: []string{exe, "sandbox-proxy-bridge"}, Egress: eg})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, []sandbox.Provider{p}, func(c *runner.Config) { c.Egress = eg })
	w := req{session: "s", messages: []string{"connect " + listed + "\nconnect " + unlisted + "\nconnect " + requested}}.wire()
	w.SandboxPermission = &wire.SandboxPermission{Network: &wire.NetworkPermission{Mode: "allowlist", Allowlist: []string{listed}}}
	out := e.runW(t, w)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "connect ok" || !strings.HasPrefix(lines[1], "connect error") || !strings.HasPrefix(lines[2], "connect error") {
		t.Fatalf("listed must connect, unlisted must not:\n%s", out)
	}
	// Listed by the request alone, it is refused at admission, naming
	// the setting.
	w = req{session: "s2", messages: []string{"connect " + requested}}.wire()
	w.SandboxPermission = &wire.SandboxPermission{Network: &wire.NetworkPermission{Mode: "allowlist", Allowlist: []string{requested}}}
	if _, err := e.svc.Run(t.Context(), w, func(int64, wire.Event) {}); err == nil || !strings.Contains(err.Error(), egress.AllowEnv) {
		t.Fatalf("a request-listed loopback service: %v; want a refusal naming %s", err, egress.AllowEnv)
	}
}
