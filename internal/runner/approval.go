package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/permission"
	"github.com/agentrunner/runner/internal/store"
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
	last := ""
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role == "user" {
			if txt := messageText(history[i]); txt != "" && !strings.HasPrefix(txt, "[") {
				last = txt
				break
			}
		}
	}
	return fmt.Sprintf("The user answered the pending tool call(s): %s. Continue the paused request exactly where it stopped; an approved call will be allowed when you issue it again, a denied one must not be retried. Re-issue it now:\n%s", strings.Join(names, ", "), last)
}

// Decide records a person's decision on a paused interaction and returns
// the turn that continues it: warm on the same harness when it is still
// parked, cold with the decision replayed otherwise. An unknown
// interaction is ErrNotFound; one already answered is ErrConflict.
func (s *Service) Decide(ctx context.Context, k store.SessionKey, interactionID string, approved bool) (*Turn, error) {
	if _, err := s.store.GetSession(ctx, k); err != nil {
		return nil, fmt.Errorf("session %s: %w", k, err)
	}
	pending, answered, err := s.interactions(ctx, k)
	if err != nil {
		return nil, err
	}
	if answered[interactionID] {
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s was already answered", interactionID))
	}
	var g *gate
	for i := range pending {
		if pending[i].InteractionID == interactionID {
			g = &pending[i]
		}
	}
	if g == nil {
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("no pending interaction %s in session %s", interactionID, k))
	}
	last, err := s.pausedRequest(ctx, k, g, approved)
	if err != nil {
		return nil, err
	}
	req := *last
	req.TurnID = ""
	out, _ := json.Marshal(map[string]bool{"approved": approved})
	req.Messages = append(append([]wire.Message{}, last.Messages...),
		wire.Message{Role: "assistant", Content: wire.MessageContent{Blocks: []wire.ContentBlock{{Type: "tool_call", ToolCallID: g.ToolCallID, ToolName: g.ToolName, Input: g.Input}}}},
		wire.Message{Role: "user", Content: wire.MessageContent{Blocks: []wire.ContentBlock{{Type: "tool_result", ToolCallID: g.ToolCallID, ToolName: g.ToolName, Input: g.Input, Output: out}}}},
	)
	return s.Start(ctx, &req)
}

// interactions reads the session log: approval requests still waiting,
// and the ids already answered.
func (s *Service) interactions(ctx context.Context, k store.SessionKey) ([]gate, map[string]bool, error) {
	evs, err := s.store.ReadEvents(ctx, k, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	return pendingFrom(evs)
}

func pendingFrom(evs []store.Event) ([]gate, map[string]bool, error) {
	answered := map[string]bool{}
	byCall := map[string]bool{}
	for _, e := range evs {
		if e.Event.Type == wire.EventInteractionRes {
			if e.Event.ID != "" {
				answered[e.Event.ID] = true
			}
			var p struct {
				ToolCallID string `json:"toolCallId"`
			}
			_ = json.Unmarshal(e.Event.Payload, &p)
			byCall[p.ToolCallID] = true
		}
	}
	var pending []gate
	for _, e := range evs {
		if e.Event.Type != wire.EventInteractionReq || answered[e.Event.ID] {
			continue
		}
		var p struct {
			ToolCallID string `json:"toolCallId"`
			ToolCall   struct {
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			} `json:"toolCall"`
		}
		_ = json.Unmarshal(e.Event.Payload, &p)
		if byCall[p.ToolCallID] {
			answered[e.Event.ID] = true
			continue
		}
		pending = append(pending, gate{InteractionID: e.Event.ID, ToolCallID: p.ToolCallID, ToolName: p.ToolCall.Name, Input: p.ToolCall.Input})
	}
	return pending, answered, nil
}

// maxResumeBytes caps the resume record a paused turn keeps in the store:
// a request larger than this stays resumable only while this runner
// holds it (warm) or by a new /run carrying the decision.
const maxResumeBytes = 4 << 20

// rememberPause keeps what a paused turn needs to resume, in the store
// (the request without its secrets) and in memory (its secrets), or
// forgets it once the session's next turn answered or superseded it.
func (s *Service) rememberPause(ctx context.Context, log *slog.Logger, k store.SessionKey, p *plan, paused bool) {
	rs, durable := s.store.(store.Resumes)
	s.mu.Lock()
	_, had := s.paused[k]
	delete(s.paused, k)
	s.mu.Unlock()
	if !paused {
		// Only a turn that may follow a pause pays for the delete: one
		// this runner saw pause, or one that answers an approval (the
		// pause may predate a restart).
		if durable && (had || len(p.approvals) > 0 || p.approvalOnly) {
			if err := rs.DeleteResume(ctx, k); err != nil {
				log.Warn("resume record not deleted", logkey.Error, err)
			}
		}
		return
	}
	if !durable {
		s.mu.Lock()
		s.paused[k] = p.req
		s.mu.Unlock()
		return
	}
	bare, secrets := splitSecrets(p.req)
	s.mu.Lock()
	s.paused[k] = secrets
	s.mu.Unlock()
	b, err := json.Marshal(bare)
	if err == nil && len(b) > maxResumeBytes {
		err = fmt.Errorf("the request is %d bytes, more than the %d a resume record keeps", len(b), maxResumeBytes)
	}
	if err == nil {
		err = rs.PutResume(ctx, store.Resume{ProjectID: k.ProjectID, SessionID: k.SessionID, Request: b, Secrets: secrets != nil, CreatedAt: time.Now()})
	}
	if err != nil {
		// The pause holds while this runner does; after a restart the
		// decision must come as a new /run (Decide says so).
		log.Warn("paused turn not resumable after a restart", logkey.Error, err)
		if derr := rs.DeleteResume(ctx, k); derr != nil {
			log.Warn("resume record not deleted", logkey.Error, derr)
		}
	}
}

// splitSecrets returns req without the fields that carry secrets
// (credentials, headers, the callback bearer), and those fields alone, or
// nil when there are none. Secrets are never written to the store.
func splitSecrets(req *wire.Request) (wire.Request, *wire.Request) {
	bare := *req
	bare.TurnID = ""
	has := len(req.Connection) > 0
	bare.Connection = nil
	if mc := req.ModelConnection; mc != nil {
		c := *mc
		has = has || len(c.Credentials) > 0 || len(c.Environment) > 0
		c.Credentials, c.Environment = nil, nil
		if c.Endpoint != nil {
			ep := *c.Endpoint
			has = has || len(ep.Headers) > 0
			ep.Headers = nil
			c.Endpoint = &ep
		}
		bare.ModelConnection = &c
	}
	if cb := req.ToolCallback; cb != nil {
		c := *cb
		has = has || c.Authorization != ""
		c.Authorization = ""
		bare.ToolCallback = &c
	}
	if len(req.MCPServers) > 0 {
		bare.MCPServers = append([]wire.MCPServer(nil), req.MCPServers...)
		for i := range bare.MCPServers {
			c := &bare.MCPServers[i].Connection
			has = has || len(c.Headers) > 0 || len(c.Credentials) > 0
			c.Headers, c.Credentials = nil, nil
		}
	}
	if !has {
		return bare, nil
	}
	return bare, &wire.Request{Connection: req.Connection, ModelConnection: req.ModelConnection, ToolCallback: req.ToolCallback, MCPServers: req.MCPServers}
}

// pausedRequest returns the request of the session's paused turn: from
// the store's resume record with its secrets from memory, or from memory
// alone with a store that keeps no resume records.
func (s *Service) pausedRequest(ctx context.Context, k store.SessionKey, g *gate, approved bool) (*wire.Request, error) {
	again := fmt.Sprintf("send the decision as the next /run whose last message is a tool_result {\"approved\": %v} for toolCallId %q", approved, g.ToolCallID)
	s.mu.Lock()
	secrets, held := s.paused[k]
	s.mu.Unlock()
	rs, durable := s.store.(store.Resumes)
	if !durable {
		if !held {
			return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s: this runner no longer holds the paused turn's configuration (it restarted); %s", g.InteractionID, again))
		}
		return secrets, nil
	}
	rec, err := rs.GetResume(ctx, k)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s: the paused turn's configuration was not kept (too large, or written by an older runner); %s", g.InteractionID, again))
	}
	if err != nil {
		return nil, fmt.Errorf("interaction %s: %w", g.InteractionID, err)
	}
	if ttl := s.cfg.ApprovalTTL; time.Since(rec.CreatedAt) > ttl {
		return nil, errdefs.With(errdefs.ErrUnprocessable, fmt.Errorf("interaction %s expired: it waited %s, longer than AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS (%s); send a new message to start the turn again", g.InteractionID, time.Since(rec.CreatedAt).Round(time.Second), ttl))
	}
	if rec.Secrets && (!held || secrets == nil) {
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s: the paused turn's credentials are not kept on disk and this runner restarted since; %s", g.InteractionID, again))
	}
	var req wire.Request
	if err := json.Unmarshal(rec.Request, &req); err != nil {
		return nil, fmt.Errorf("interaction %s: resume record: %w", g.InteractionID, err)
	}
	if rec.Secrets {
		req.Connection, req.ModelConnection, req.ToolCallback, req.MCPServers = secrets.Connection, secrets.ModelConnection, secrets.ToolCallback, secrets.MCPServers
	}
	return &req, nil
}
