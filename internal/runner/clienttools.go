package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/permission"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/wire"
)

// Client tools (customTools[].kind "client", docs/contract.md, Tools) are fulfilled
// by the caller's browser: a call with no stored output raises an
// interaction_request of kind client_tool and pauses the turn; the
// browser's output arrives on a later run as a tool_result for the call,
// and the re-issued call returns it.

// errClientPaused cancels the prompt of a turn a client tool paused.
var errClientPaused = errors.New("paused for a client tool")

// clientResults are the browser outputs a request carries: non-approval
// tool_result blocks, by tool call id and by the call's name and
// arguments.
type clientResults struct {
	byID, byKey map[string]string
}

func clientResultsOf(msgs []wire.Message) *clientResults {
	calls := map[string]wire.ContentBlock{}
	for _, m := range msgs {
		for _, b := range m.Content.Blocks {
			if b.Type == "tool_call" && b.ToolCallID != "" {
				calls[b.ToolCallID] = b
			}
		}
	}
	r := &clientResults{byID: map[string]string{}, byKey: map[string]string{}}
	for _, m := range msgs {
		for _, b := range m.Content.Blocks {
			if b.Type != "tool_result" || len(b.Output) == 0 || len(approvalsOf(wire.Message{Content: wire.MessageContent{Blocks: []wire.ContentBlock{b}}})) > 0 {
				continue
			}
			out := string(b.Output)
			var s string
			if json.Unmarshal(b.Output, &s) == nil {
				out = s
			}
			if b.ToolCallID != "" {
				r.byID[b.ToolCallID] = out
			}
			name, args := b.ToolName, b.Input
			if c, ok := calls[b.ToolCallID]; ok {
				if name == "" {
					name = c.ToolName
				}
				if len(args) == 0 {
					args = c.Input
				}
			}
			if key, ok := permission.CallKey(name, args); ok {
				r.byKey[key] = out
			}
		}
	}
	return r
}

func (r *clientResults) lookup(c tools.Call) (string, bool) {
	if r == nil {
		return "", false
	}
	if out, ok := r.byID[c.ID]; ok && c.ID != "" {
		return out, true
	}
	key, ok := permission.CallKey(c.Tool, c.Args)
	if !ok {
		return "", false
	}
	out, ok := r.byKey[key]
	return out, ok
}

// carriesToolResult reports whether m carries any tool_result block.
func carriesToolResult(m wire.Message) bool {
	for _, b := range m.Content.Blocks {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}

// clientCall answers a client tool call: the browser's stored output,
// or an interaction_request that pauses the turn.
func (t *turn) clientCall(ctx context.Context, c tools.Call) (string, error) {
	if out, ok := t.plan.clientResults.lookup(c); ok {
		return out, nil
	}
	if t.key.SessionID == "" {
		return "", fmt.Errorf("tool %s is fulfilled by the user's browser, and a run without a sessionId cannot pause for it", c.Tool)
	}
	var render json.RawMessage
	for _, sp := range t.plan.req.CustomTools {
		if sp.Name == c.Tool {
			render = sp.Render
		}
	}
	id := "int_" + randomHex(8)
	payload, _ := json.Marshal(map[string]any{
		"toolCallId": c.ID, "toolName": c.Tool, "input": rawOrEmpty(c.Args), "render": render,
		"toolCall": map[string]any{"name": c.Tool, "resolvedName": c.Tool, "input": rawOrEmpty(c.Args)},
	})
	t.emit(wire.Event{Type: wire.EventInteractionReq, ID: id, Kind: "client_tool", Payload: payload})
	t.clientPaused.Store(true)
	t.cancel(errClientPaused)
	return "", fmt.Errorf("tool %s: waiting for the user's browser; the turn is paused", c.Tool)
}

// clientPause turns the cancellation a client tool caused into a pause.
func (t *turn) clientPause(ctx context.Context, out agent.Outcome, err error) (agent.Outcome, error) {
	if !t.clientPaused.Load() || !errors.Is(context.Cause(ctx), errClientPaused) {
		return out, err
	}
	return agent.Outcome{StopReason: agent.StopPaused, Usage: out.Usage}, nil
}

// clientResultFrame closes a cold transcript that carries a client
// tool's result: the harness re-issues the call, which the stored
// output then answers.
func clientResultFrame(history []wire.Message) string {
	return "The user's browser returned the result of the pending tool call. Continue the paused request exactly where it stopped: call the tool again with the same arguments and its result will be returned. Re-issue it now:\n" + lastRequest(history)
}
