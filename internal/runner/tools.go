package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/permission"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/tools/relay"
	"github.com/agentrunner/runner/internal/wire"
)

// ToolsConfig is how the runner serves the platform's tools to harnesses.
type ToolsConfig struct {
	// Base is copied into every turn's tools.Config (allowlist, timeouts).
	Base tools.Config
	// Relay serves tool calls arriving from `runner mcp-stdio` processes
	// inside sandboxes; Socket is its unix socket, bound into each sandbox
	// at the same path. Nil disables runner tools: requests with
	// customTools are refused.
	Relay  *relay.Relay
	Socket string
	// Shim is the command line of the in-sandbox stdio MCP server:
	// the runner's own binary and "mcp-stdio". Shim[0] is bound into the
	// sandbox read-only.
	Shim []string
}

// checkTools refuses, at admission, tool requests this runner or harness
// cannot serve: loudly, naming what to change.
func (s *Service) checkTools(p *plan) error {
	if len(p.req.CustomTools) > 0 {
		if s.cfg.Tools.Relay == nil || len(s.cfg.Tools.Shim) == 0 {
			return errdefs.Unprocessablef("customTools: this runner has no tool relay configured")
		}
		if p.harness.spec.NoMCP {
			return errdefs.Unprocessablef("customTools: harness %q cannot take MCP tools; use a harness with MCP support (claude, codex, gemini, opencode)", p.harness.spec.Name)
		}
		if p.req.ToolCallback == nil || p.req.ToolCallback.Endpoint == "" {
			for _, t := range p.req.CustomTools {
				if t.Kind == "" || t.Kind == "callback" {
					return errdefs.Invalidf("toolCallback.endpoint: required when customTools has callback tools (%s)", t.Name)
				}
			}
		}
	}
	if p.harness.spec.NoPermissions {
		// Nothing it runs passes the runner first, so every policy but
		// "allow" would run unenforced: refused, the default included.
		policy, rules := "allow_reads", 0
		if pm := p.req.Permissions; pm != nil {
			if pm.Default != "" {
				policy = pm.Default
			}
			rules = len(pm.Rules)
		}
		if s.cfg.DenyAllPermissions {
			policy = "deny (AGENTA_RUNNER_DENY_ALL_PERMISSIONS)"
		}
		if policy != "allow" || rules > 0 {
			return errdefs.Unprocessablef("permissions: harness %q runs its tools without asking the runner, so permissions.default=%q (the default is allow_reads: read-like tools allowed, the rest ask) and permission rules cannot be enforced on it; set permissions.default \"allow\" to run it with every tool allowed, or use a harness that asks (claude, codex, gemini, opencode)", p.harness.spec.Name, policy)
		}
	}
	if len(p.req.MCPServers) > 0 && p.harness.spec.NoMCP {
		return errdefs.Unprocessablef("mcpServers: harness %q does not take MCP servers", p.harness.spec.Name)
	}
	return nil
}

// toolSet builds the turn's tool set: the request's tools, executed
// runner-side, each call audited and gated by the permission plan.
func (t *turn) toolSet() (*tools.Set, error) {
	if len(t.plan.req.CustomTools) == 0 {
		return nil, nil
	}
	cfg := t.svc.cfg.Tools.Base
	cfg.SessionID = t.plan.req.SessionID
	if t.plan.req.RunContext != nil {
		cfg.RunContext, _ = json.Marshal(t.plan.req.RunContext)
	}
	client := map[string]bool{}
	for _, sp := range t.plan.req.CustomTools {
		client[sp.Name] = sp.Kind == "client" && sp.Permission == ""
	}
	cfg.Check = func(ctx context.Context, c tools.Call) error {
		if client[c.Tool] {
			return nil // a client tool's permission defaults to allow (docs/contract.md, Tools)
		}
		v := t.plan.perms.DecideWith(permission.Call{Tool: c.Tool, ToolCallID: c.ID, Args: c.Args}, t.plan.decisions)
		switch v.Permission {
		case permission.Allow:
			return nil
		case permission.Deny:
			return fmt.Errorf("%s is not permitted in this run (%s %s); do not retry it", c.Tool, v.Source, v.Rule)
		}
		return fmt.Errorf("%s needs a person's approval, and this call was not approved; ask the user to approve it", c.Tool)
	}
	cfg.Client = t.clientCall
	cfg.OnCall = func(r tools.CallRecord) {
		t.emit(wire.DataEvent("audit.tool_call", map[string]any{
			"tool": r.Tool, "callId": r.ID, "args": json.RawMessage(r.Args), "start": r.Start, "durationMs": r.Duration.Milliseconds(),
			"outcome": r.Outcome, "status": r.Status, "truncated": r.Truncated, "error": r.Err,
		}, false))
	}
	set, err := tools.New(cfg, t.plan.req.CustomTools, t.plan.req.ToolCallback, t.log)
	if err != nil {
		return nil, fmt.Errorf("customTools: %w", err)
	}
	return set, nil
}

// mcpServers is what the harness is given in session/new: the runner's
// tool relay (when the turn has tools) and the user's HTTP MCP servers.
func (c *coldStart) mcpServers(lv *live) []agent.MCPServer {
	t := c.t
	var out []agent.MCPServer
	switch {
	case lv.binding != nil && lv.channel != nil:
		out = append(out, agent.MCPServer{Name: tools.ServerName, Command: lv.channel.ch.RunnerPath(), Args: []string{"mcp-stdio"}, Env: channelEnv(lv.binding, lv.channel.ch)})
	case lv.binding != nil:
		shim := t.svc.cfg.Tools.Shim
		out = append(out, agent.MCPServer{Name: tools.ServerName, Command: shim[0], Args: shim[1:], Env: lv.binding.Env(t.svc.cfg.Tools.Socket)})
	}
	for _, m := range t.plan.req.MCPServers {
		h := map[string]string{}
		for k, v := range m.Connection.Headers {
			h[k] = v
		}
		for _, c := range m.Connection.Credentials {
			h[c.Binding.Name] = c.Value
		}
		out = append(out, agent.MCPServer{Name: m.Name, URL: m.Connection.URL, Headers: h})
	}
	return out
}

// toolBinds are the host paths a sandbox needs for the tool relay.
func (s *Service) toolBinds() []sandbox.Bind {
	if s.cfg.Tools.Relay == nil || len(s.cfg.Tools.Shim) == 0 {
		return nil
	}
	// Connecting to a unix socket needs no write access to its mount.
	return []sandbox.Bind{{Path: s.cfg.Tools.Shim[0]}, {Path: s.cfg.Tools.Socket}}
}

// mcpHosts are the user MCP servers' host:port, reachable under a
// restricted network.
func mcpHosts(servers []wire.MCPServer) []string {
	var out []string
	for _, m := range servers {
		if u, err := url.Parse(m.Connection.URL); err == nil && u.Host != "" {
			out = append(out, u.Host)
		}
	}
	return out
}
