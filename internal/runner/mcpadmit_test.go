package runner_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
)

// User MCP servers are checked at admission: an internal address or plain
// http is refused with a message naming AGENTA_AGENT_MCPS_HOST_ALLOWLIST,
// and an allowlisted host passes.
func TestMCPServerURLCheckedAtAdmission(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) { c.Tools.Base.HostAllowlist = []string{"mcp.internal"} })
	for _, u := range []string{"https://127.0.0.1:9/mcp", "https://169.254.169.254/x", "https://10.1.2.3/mcp", "http://[::1]:9/mcp"} {
		w := req{session: "s-" + u, messages: []string{"hi"}}.wire()
		w.MCPServers = []wire.MCPServer{{Name: "m", Connection: wire.MCPConnection{Type: "http", URL: u}}}
		_, err := e.svc.Run(t.Context(), w, nil)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "mcpServers[0].connection.url") || !strings.Contains(err.Error(), "AGENTA_AGENT_MCPS_HOST_ALLOWLIST") {
			t.Errorf("mcp server %s: %v, want an invalid-request error naming the field and the allowlist", u, err)
		}
	}
	w := req{session: "s-ok", messages: []string{"hi"}}.wire()
	w.MCPServers = []wire.MCPServer{{Name: "m", Connection: wire.MCPConnection{Type: "http", URL: "http://mcp.internal:8000/mcp"}}}
	if _, err := e.svc.Run(t.Context(), w, nil); err != nil {
		t.Errorf("allowlisted mcp server: %v", err)
	}
}

// ctxResolver answers with a public address and records whether the
// lookup ran under the caller's context.
type ctxResolver struct {
	mu     sync.Mutex
	called bool
	under  bool
}

type callerKey struct{}

func (r *ctxResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.called = true
	r.under = ctx.Value(callerKey{}) != nil
	return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
}

// The MCP server's DNS lookup at admission runs under the request's
// context, so the caller's deadline and cancellation bound it.
func TestMCPServerLookupUsesTheRequestContext(t *testing.T) {
	res := &ctxResolver{}
	e := newEnv(t, func(c *runner.Config) { c.Tools.Base.Resolver = res })
	w := req{session: "s", messages: []string{"hi"}}.wire()
	w.MCPServers = []wire.MCPServer{{Name: "m", Connection: wire.MCPConnection{Type: "http", URL: "https://mcp.example.com/mcp"}}}
	ctx := context.WithValue(t.Context(), callerKey{}, true)
	_, _ = e.svc.Run(ctx, w, nil)
	res.mu.Lock()
	defer res.mu.Unlock()
	if !res.called || !res.under {
		t.Fatalf("lookup called %v, under the request's context %v; want both", res.called, res.under)
	}
}
