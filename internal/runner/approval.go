package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/permission"
	"github.com/agentrunner/runner/internal/wire"
)

// gate is a permission request parked for a person's decision.
type gate struct {
	InteractionID string          `json:"interactionId"`
	PermID        string          `json:"-"`
	ToolCallID    string          `json:"toolCallId"`
	ToolName      string          `json:"toolName"`
	Input         json.RawMessage `json:"input,omitempty"`
}

// approvalsOf reads a tail message's approval envelopes: tool_result
// blocks whose output is {"approved": bool}.
func approvalsOf(m wire.Message) map[string]bool {
	out := map[string]bool{}
	for _, b := range m.Content.Blocks {
		if b.Type != "tool_result" || b.ToolCallID == "" {
			continue
		}
		var v struct {
			Approved *bool `json:"approved"`
		}
		raw := b.Output
		var s string
		if json.Unmarshal(raw, &s) == nil {
			raw = json.RawMessage(s)
		}
		if json.Unmarshal(raw, &v) == nil && v.Approved != nil {
			out[b.ToolCallID] = *v.Approved
		}
	}
	return out
}

func readKind(kind string) bool {
	switch kind {
	case "read", "search", "think", "fetch":
		return true
	}
	return false
}

// permission answers a harness's permission request by the turn's plan:
// allow, deny (visibly, as a denied tool_result), or park the request for
// a person and pause the turn.
func (t *turn) permission(ctx context.Context, req agent.PermissionRequest) agent.Decision {
	name := req.ToolName
	call := permission.Call{Tool: name, ToolCallID: req.ToolCallID, Args: req.RawInput, ReadOnly: readKind(req.Kind)}
	if server, tool, ok := permission.SplitMCPName(name); ok {
		call.Server, call.Tool = server, tool
		if server == "agenta-tools" {
			call.Server = ""
		}
	}
	v := t.plan.perms.DecideWith(call, t.plan.decisions)
	audit := func(outcome, by string) {
		t.svc.cfg.Metrics.Approval(outcome, by)
		t.emit(wire.DataEvent("audit.permission", map[string]any{
			"tool": name, "toolCallId": req.ToolCallID, "args": rawOrEmpty(req.RawInput), "outcome": outcome,
			"decidedBy": by, "source": v.Source, "rule": v.Rule, "at": time.Now().UTC(),
		}, false))
	}
	switch v.Permission {
	case permission.Allow:
		by := "policy"
		if v.Source == permission.SourceStored {
			by = "user"
			t.emit(interactionResponse("", req.ToolCallID, true, "user (earlier decision)"))
		}
		audit("allowed", by)
		return agent.Decision{Allow: true}
	case permission.Deny:
		by, why := "policy", "denied by the run's permission policy; retrying will not help"
		if v.Source == permission.SourceStored {
			by, why = "user", "the user declined this call; do not retry it, ask what to do instead"
			t.emit(interactionResponse("", req.ToolCallID, false, "user (earlier decision)"))
		}
		t.emitDenied(req, why)
		audit("denied", by)
		return agent.Decision{Allow: false, Reason: by}
	}
	if t.key.SessionID == "" || t.lv == nil {
		t.emitDenied(req, "needs a person's approval, but a run without a sessionId cannot pause for it; nothing ran")
		audit("denied", "runner")
		return agent.Decision{Allow: false, Reason: "approval unavailable"}
	}
	g := gate{InteractionID: "int_" + randomHex(8), PermID: req.ID, ToolCallID: req.ToolCallID, ToolName: name, Input: rawOrEmpty(req.RawInput)}
	t.lv.addGate(g)
	payload, _ := json.Marshal(map[string]any{
		"toolCallId":       req.ToolCallID,
		"toolCall":         map[string]any{"name": name, "resolvedName": call.Tool, "input": g.Input, "kind": req.Kind, "title": req.Title},
		"availableReplies": []string{"approve", "reject"},
		"options":          req.Options,
	})
	t.emit(wire.Event{Type: wire.EventInteractionReq, ID: g.InteractionID, Kind: "user_approval", Payload: payload})
	audit("asked", "policy")
	return agent.Decision{Park: true}
}

func interactionResponse(id, toolCallID string, approved bool, by string) wire.Event {
	payload, _ := json.Marshal(map[string]any{"approved": approved, "toolCallId": toolCallID, "decidedBy": by})
	return wire.Event{Type: wire.EventInteractionRes, ID: id, Kind: "user_approval", Payload: payload}
}

func (t *turn) emitDenied(req agent.PermissionRequest, why string) {
	ev := wire.ToolResultEvent(req.ToolCallID, fmt.Sprintf("%s: %s", req.ToolName, why), nil, false)
	ev.Denied = true
	t.emit(ev)
}

func rawOrEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// resumeWarm answers the parked gates of a warm session with the tail's
// decisions and continues the paused turn on the same harness process.
// It returns ok=false when the tail answers none of them.
func (t *turn) resumeWarm(ctx context.Context, lv *live) (agent.Outcome, bool, error) {
	gates := lv.takeGates()
	decisions := map[string]agent.Decision{}
	var carried []gate
	for _, g := range gates {
		approved, ok := t.plan.approvals[g.ToolCallID]
		if id, byToken := t.plan.tokens[g.InteractionID]; !ok && byToken {
			approved, ok = t.plan.approvals[id] // answered on the platform, by its token
		}
		if !ok {
			carried = append(carried, g)
			continue
		}
		decisions[g.PermID] = agent.Decision{Allow: approved, Reason: "user"}
		t.emit(interactionResponse(g.InteractionID, g.ToolCallID, approved, "user"))
		t.emit(wire.DataEvent("audit.permission", map[string]any{
			"tool": g.ToolName, "toolCallId": g.ToolCallID, "args": g.Input, "outcome": map[bool]string{true: "allowed", false: "denied"}[approved],
			"decidedBy": "user", "interactionId": g.InteractionID, "at": time.Now().UTC(),
		}, false))
		if !approved {
			ev := wire.ToolResultEvent(g.ToolCallID, g.ToolName+": the user declined this call; do not retry it, ask what to do instead", nil, false)
			ev.Denied = true
			t.emit(ev)
		}
	}
	for _, g := range carried {
		lv.addGate(g)
	}
	if len(decisions) == 0 {
		return agent.Outcome{}, false, nil
	}
	out, err := lv.sess.Resume(ctx, decisions, t.fromHarness)
	return out, true, err
}

// approvalFrame is the closing of a cold transcript that resumes a turn
// paused for approval: the harness re-issues the call, which the stored
// decision then answers.
func approvalFrame(history []wire.Message, approvals map[string]bool) string {
	var names []string
	for id, ok := range approvals {
		verdict := "APPROVED"
		if !ok {
			verdict = "DENIED"
		}
		names = append(names, verdict+" "+id)
	}
	return fmt.Sprintf("The user answered the pending tool call(s): %s. Continue the paused request exactly where it stopped; an approved call will be allowed when you issue it again, a denied one must not be retried. Re-issue it now:\n%s", strings.Join(names, ", "), lastRequest(history))
}
