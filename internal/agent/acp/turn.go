package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/jsonrpc"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/wire"
)

// Prompt implements agent.Session.
func (s *Session) Prompt(ctx context.Context, blocks []json.RawMessage, sink agent.Sink) (agent.Outcome, error) {
	s.mu.Lock()
	if s.call != nil {
		s.mu.Unlock()
		return agent.Outcome{}, errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s already has a turn in flight", s.id))
	}
	call := &promptCall{done: make(chan struct{}), costBase: s.cost}
	s.call = call
	s.sink = sink
	s.mapper = newMapper()
	s.mu.Unlock()

	go func() {
		// The request outlives ctx on purpose: cancellation is ACP's
		// session/cancel, after which the harness still answers.
		call.err = s.conn.Call(context.Background(), "session/prompt", promptParams{SessionID: s.id, Prompt: blocks}, &call.res)
		close(call.done)
	}()
	return s.wait(ctx, call)
}

// Resume implements agent.Session.
func (s *Session) Resume(ctx context.Context, decisions map[string]agent.Decision, sink agent.Sink) (agent.Outcome, error) {
	s.mu.Lock()
	call := s.call
	if call == nil {
		s.mu.Unlock()
		return agent.Outcome{}, errdefs.With(errdefs.ErrConflict, fmt.Errorf("session %s has no paused turn", s.id))
	}
	s.sink = sink
	var answer []*pendingPermission
	var ds []agent.Decision
	for id, d := range decisions {
		p, ok := s.parked[id]
		if !ok || !p.parked {
			s.mu.Unlock()
			return agent.Outcome{}, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("no parked permission request %q in session %s", id, s.id))
		}
		delete(s.parked, id)
		answer = append(answer, p)
		ds = append(ds, d)
	}
	s.mu.Unlock()
	for i, p := range answer {
		p.answer <- ds[i]
	}
	return s.wait(ctx, call)
}

// wait waits for the turn to end, a request to park, the harness to die or
// ctx to be cancelled.
func (s *Session) wait(ctx context.Context, call *promptCall) (agent.Outcome, error) {
	if out, ok := s.parkedOutcome(); ok {
		return out, nil
	}
	select {
	case <-call.done:
		return s.finish(call)
	case <-s.wake:
		if out, ok := s.parkedOutcome(); ok {
			return out, nil
		}
		return s.wait(ctx, call)
	case <-s.conn.Done():
		s.endTurn()
		return agent.Outcome{}, s.explain("prompt", jsonrpc.ErrClosed)
	case <-ctx.Done():
		return s.cancel(call)
	}
}

func (s *Session) parkedOutcome() (agent.Outcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parked []agent.PermissionRequest
	for _, p := range s.parked {
		if p.parked {
			parked = append(parked, p.req)
		}
	}
	if len(parked) == 0 {
		return agent.Outcome{}, false
	}
	s.closeBlocksLocked()
	s.sink = nil
	return agent.Outcome{StopReason: agent.StopPaused, Parked: parked}, true
}

// cancel follows ACP: session/cancel, every pending permission answered
// "cancelled", then the prompt's own answer (stopReason cancelled). A
// harness that does not answer within the grace period is killed.
func (s *Session) cancel(call *promptCall) (agent.Outcome, error) {
	_ = s.conn.Notify("session/cancel", cancelParams{SessionID: s.id})
	s.answerAll(agent.Decision{}, true)
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case <-call.done:
		out, err := s.finish(call)
		if err == nil {
			out.StopReason = agent.StopCancelled
		}
		return out, err
	case <-s.conn.Done():
	case <-t.C:
		s.log.Warn("harness ignored session/cancel; killing it")
		_ = s.proc.Kill()
	}
	s.endTurn()
	return agent.Outcome{StopReason: agent.StopCancelled}, nil
}

func (s *Session) finish(call *promptCall) (agent.Outcome, error) {
	s.endTurn()
	if call.err != nil {
		if _, ok := call.err.(*jsonrpc.Error); ok {
			select {
			case <-s.conn.Done():
				return agent.Outcome{}, s.explain("prompt", call.err)
			default:
			}
			return agent.Outcome{}, fmt.Errorf("harness %s: %w", s.spec.Name, call.err)
		}
		return agent.Outcome{}, s.explain("prompt", call.err)
	}
	out := agent.Outcome{StopReason: call.res.StopReason}
	if out.StopReason == "" {
		out.StopReason = agent.StopEndTurn
	}
	if u := call.res.Usage; u != nil {
		total := u.TotalTokens
		if total == 0 {
			total = u.InputTokens + u.OutputTokens
		}
		out.Usage = &wire.Usage{Input: u.InputTokens, Output: u.OutputTokens, Total: total}
	}
	s.mu.Lock()
	cost := s.cost - call.costBase
	s.mu.Unlock()
	if cost > 0 {
		if out.Usage == nil {
			out.Usage = &wire.Usage{}
		}
		out.Usage.Cost = cost
	}
	return out, nil
}

// noteCostLocked keeps the cumulative cost a usage_update reports. Most
// updates are text chunks: they are told apart without decoding them.
func (s *Session) noteCostLocked(raw json.RawMessage) {
	if !bytes.Contains(raw, []byte(`"usage_update"`)) {
		return
	}
	var u struct {
		SessionUpdate string `json:"sessionUpdate"`
		Cost          *struct {
			Amount float64 `json:"amount"`
		} `json:"cost"`
	}
	if json.Unmarshal(raw, &u) == nil && u.SessionUpdate == "usage_update" && u.Cost != nil && u.Cost.Amount >= s.cost {
		s.cost = u.Cost.Amount
	}
}

func (s *Session) endTurn() {
	s.mu.Lock()
	s.closeBlocksLocked()
	s.call = nil
	s.sink = nil
	foreign := s.foreign
	s.foreign = 0
	s.mu.Unlock()
	if foreign > 0 {
		s.log.Warn("ignored session/update notifications addressed to another session", logkey.Count, foreign)
	}
}

func (s *Session) closeBlocksLocked() {
	if s.mapper != nil && s.sink != nil {
		for _, ev := range s.mapper.close() {
			s.sink(ev)
		}
	}
}

// answerAll answers every pending permission request: cancelled, or d.
func (s *Session) answerAll(d agent.Decision, cancelled bool) {
	s.mu.Lock()
	pending := s.parked
	s.parked = map[string]*pendingPermission{}
	s.mu.Unlock()
	for _, p := range pending {
		if cancelled {
			close(p.answer)
		} else {
			p.answer <- d
		}
	}
}

// handle serves the harness's requests and notifications.
func (s *Session) handle(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
	switch method {
	case "session/update":
		var p updateParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.noteCostLocked(p.Update) // a load replay's too: it is the session's running total
		if s.loading || s.sink == nil || s.mapper == nil {
			return nil, nil // a load replay or between turns: not part of a turn
		}
		if p.SessionID != s.id {
			// Not this turn's, whoever wrote it (a tool can write to the
			// harness's stdout): counted, logged once at the turn's end.
			s.foreign++
			return nil, nil
		}
		for _, ev := range s.mapper.update(p.Update) {
			s.sink(ev)
		}
		return nil, nil
	case "session/request_permission":
		return s.permission(ctx, params)
	}
	if notify {
		return nil, nil // unknown notifications, including _ extensions, are ignored
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + method}
}

func (s *Session) permission(ctx context.Context, params json.RawMessage) (any, error) {
	var p permissionParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	s.mu.Lock()
	s.permSeq++
	req := agent.PermissionRequest{
		ID:         "perm-" + strconv.Itoa(s.permSeq),
		ToolCallID: p.ToolCall.ToolCallID,
		Title:      p.ToolCall.Title,
		Kind:       p.ToolCall.Kind,
		RawInput:   p.ToolCall.RawInput,
		Options:    p.Options,
	}
	if s.mapper != nil {
		req.ToolName = s.mapper.toolName(req.ToolCallID)
		if len(req.RawInput) == 0 {
			req.RawInput = s.mapper.toolInput(req.ToolCallID)
		}
	}
	if req.ToolName == "" {
		req.ToolName = req.Title
	}
	inTurn := s.call != nil
	pp := &pendingPermission{req: req, answer: make(chan agent.Decision, 1)}
	s.parked[req.ID] = pp
	s.mu.Unlock()

	if !inTurn || s.perm == nil {
		s.forget(req.ID)
		return answer(p.Options, agent.Decision{Allow: false}), nil
	}
	d := s.perm(ctx, req)
	if !d.Park {
		s.forget(req.ID)
		if !d.Allow {
			s.closeTool(req.ToolCallID)
		}
		return answer(p.Options, d), nil
	}
	s.mu.Lock()
	if _, still := s.parked[req.ID]; still {
		pp.parked = true
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.log.Info("permission parked", "request", req.ID, "tool_call", req.ToolCallID)
	select {
	case d, ok := <-pp.answer:
		if !ok {
			return permissionResult{Outcome: permissionOutcome{Outcome: "cancelled"}}, nil
		}
		if !d.Allow {
			s.closeTool(req.ToolCallID)
		}
		return answer(p.Options, d), nil
	case <-ctx.Done():
		return permissionResult{Outcome: permissionOutcome{Outcome: "cancelled"}}, nil
	}
}

// closeTool marks a denied call as finished: the runner already reported
// it (a denied tool_result), so the harness's own failure update for it
// must not produce a second result.
func (s *Session) closeTool(toolCallID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mapper != nil && toolCallID != "" {
		st, _ := s.mapper.state(toolCallID)
		st.finished = true
		s.mapper.keep(st, st.name, nil)
	}
}

func (s *Session) forget(id string) {
	s.mu.Lock()
	delete(s.parked, id)
	s.mu.Unlock()
}

// answer picks the option by kind, never by id: harnesses name their
// options differently ("allow", "proceed_once", "approved" …).
func answer(opts []agent.PermissionOption, d agent.Decision) permissionResult {
	prefs := []string{"reject_once", "reject_always"}
	if d.Allow {
		prefs = []string{"allow_once", "allow_always"}
	}
	for _, kind := range prefs {
		for _, o := range opts {
			if o.Kind == kind {
				return permissionResult{Outcome: permissionOutcome{Outcome: "selected", OptionID: o.OptionID}}
			}
		}
	}
	return permissionResult{Outcome: permissionOutcome{Outcome: "cancelled"}}
}

var _ = logkey.Error
