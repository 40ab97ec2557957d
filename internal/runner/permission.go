package runner

import (
	"context"
	"fmt"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/wire"
)

// permission answers the harness by the request's permission plan.
func (t *turn) permission(ctx context.Context, req agent.PermissionRequest) agent.Decision {
	verdict := decide(t.plan.req.Permissions, req)
	switch verdict {
	case "allow":
		return agent.Decision{Allow: true}
	case "deny":
		t.emitDenied(req, "denied by the run's permission policy")
		return agent.Decision{Allow: false, Reason: "policy"}
	}
	// "ask" without a human channel: refuse, visibly.
	t.emitDenied(req, "needs approval; approvals are not available on this path")
	return agent.Decision{Allow: false, Reason: "approval unavailable"}
}

func (t *turn) emitDenied(req agent.PermissionRequest, why string) {
	ev := wire.ToolResultEvent(req.ToolCallID, fmt.Sprintf("%s: %s", req.ToolName, why), nil, false)
	ev.Denied = true
	t.emit(ev)
}

// decide is the permission plan's verdict for a harness permission request.
func decide(p *wire.Permissions, req agent.PermissionRequest) string {
	def := "allow_reads"
	if p != nil && p.Default != "" {
		def = p.Default
	}
	switch def {
	case "allow", "deny", "ask":
		return def
	case "allow_reads":
		switch req.Kind {
		case "read", "search", "think", "fetch":
			return "allow"
		}
		return "ask"
	}
	return "ask" // malformed plans fail safe
}
