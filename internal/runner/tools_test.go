package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/tools/relay"
	"github.com/agentrunner/runner/internal/wire"
)

// shimArg makes the test binary act as `runner mcp-stdio`.
const shimArg = "__mcp_stdio__"

func maybeShim() {
	if len(os.Args) > 1 && os.Args[1] == shimArg {
		os.Exit(relay.MCPStdio(context.Background(), os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	}
}

type callback struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []map[string]any
	auth []string
}

func newCallback(t *testing.T, h func(w http.ResponseWriter, body map[string]any)) *callback {
	c := &callback{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		c.mu.Lock()
		c.reqs = append(c.reqs, body)
		c.auth = append(c.auth, r.Header.Get("Authorization"))
		c.mu.Unlock()
		h(w, body)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// withTools gives the service a real relay on a unix socket and the test
// binary as the mcp-stdio shim.
func withTools(t *testing.T) option {
	dir, err := os.MkdirTemp("", "rt") // short: sun_path is 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tools.sock")
	ln, err := relay.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	r := relay.New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); ln.Close(); <-done })
	exe, _ := os.Executable()
	return func(c *runner.Config) {
		c.Tools = runner.ToolsConfig{
			// No allowlist entry for the loopback callback: it is trusted.
			Base:   tools.Config{DefaultTimeout: 2 * time.Second},
			Relay:  r,
			Socket: sock,
			Shim:   []string{exe, shimArg},
		}
	}
}

func toolReq(session, prompt, endpoint string) *wire.Request {
	r := req{session: session, messages: []string{prompt}}.wire()
	r.CustomTools = []wire.ToolSpec{{Name: "lookup", Description: "look a thing up", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`), ReadOnly: true}}
	r.ToolCallback = &wire.ToolCallback{Endpoint: endpoint + "/tools/call", Authorization: "turn-bearer-123"}
	return r
}

func TestToolCallThroughTheRelay(t *testing.T) {
	cb := newCallback(t, func(w http.ResponseWriter, body map[string]any) {
		_ = json.NewEncoder(w).Encode(map[string]any{"result": "found it"})
	})
	e := newEnv(t, withTools(t))
	var audit []wire.Event
	var mu sync.Mutex
	res, err := e.svc.Run(t.Context(), toolReq("s", `mcp agenta-tools lookup {"q":"answer"}`, cb.srv.URL), func(_ int64, ev wire.Event) {
		if ev.Name == "audit.tool_call" {
			mu.Lock()
			audit = append(audit, ev)
			mu.Unlock()
		}
	})
	if err != nil || !strings.Contains(res.Output, "mcp result:") || !strings.Contains(res.Output, "found it") {
		t.Fatalf("result %q err %v", res.Output, err)
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if len(cb.reqs) != 1 || cb.auth[0] != "Bearer turn-bearer-123" {
		t.Fatalf("callback got %v with auth %v", cb.reqs, cb.auth)
	}
	if b, _ := json.Marshal(cb.reqs[0]); !strings.Contains(string(b), `"answer"`) || !strings.Contains(string(b), "lookup") {
		t.Errorf("callback body %s", b)
	}
	if len(audit) != 1 || !strings.Contains(string(audit[0].Data), `"outcome":"ok"`) {
		t.Errorf("audit %v", audit)
	}
}

func TestToolCallbackFailureIsAToolError(t *testing.T) {
	cb := newCallback(t, func(w http.ResponseWriter, body map[string]any) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	e := newEnv(t, withTools(t))
	res, err := e.svc.Run(t.Context(), toolReq("s", `mcp agenta-tools lookup {"q":"x"}`, cb.srv.URL), nil)
	if err != nil || !res.OK || !strings.Contains(res.Output, "mcp result: [error]") {
		t.Fatalf("a failing callback must reach the model as a tool error: %q %v", res.Output, err)
	}
}

func TestToolsOnAHarnessWithoutMCP(t *testing.T) {
	e := newEnv(t, withTools(t), func(c *runner.Config) {
		s := c.Harnesses["fake"]
		s.NoMCP = true
		c.Harnesses["nomcp"] = s
	})
	r := toolReq("s", "hi", "https://example.com")
	r.Harness = "nomcp"
	_, err := e.svc.Run(t.Context(), r, nil)
	if err == nil || !strings.Contains(err.Error(), `harness "nomcp" cannot take MCP tools`) {
		t.Fatalf("err %v", err)
	}
}

func TestToolsWithoutRelayRefused(t *testing.T) {
	e := newEnv(t)
	_, err := e.svc.Run(t.Context(), toolReq("s", "hi", "https://example.com"), nil)
	if err == nil || !strings.Contains(err.Error(), "no tool relay") {
		t.Fatalf("err %v", err)
	}
}

func TestPolicyOnAHarnessThatNeverAsks(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) {
		s := c.Harnesses["fake"]
		s.NoPermissions = true
		c.Harnesses["pi_like"] = s
	})
	w := req{session: "s", harness: "pi_like", messages: []string{"hi"}}.wire()
	// Every policy but allow, the default (none sent) included, would run
	// unenforced: refused, naming it.
	for _, pm := range []*wire.Permissions{nil, {}, {Default: "allow_reads"}, {Default: "ask"}, {Default: "deny"}, {Default: "allow", Rules: []wire.PermissionRule{{}}}} {
		w.Permissions = pm
		if _, err := e.svc.Run(t.Context(), w, nil); err == nil || !strings.Contains(err.Error(), "cannot be enforced") || !strings.Contains(err.Error(), `permissions.default "allow"`) {
			t.Fatalf("permissions %+v on a harness that never asks: %v", pm, err)
		}
	}
	w.Permissions = &wire.Permissions{Default: "allow"}
	if _, err := e.svc.Run(t.Context(), w, nil); err != nil {
		t.Fatalf("allow: %v", err)
	}
}
