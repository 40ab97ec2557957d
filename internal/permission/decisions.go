package permission

import (
	"encoding/json"
	"sync"

	"github.com/agentrunner/runner/internal/wire"
)

// Decisions are the approvals and refusals a person already gave, as
// carried by the request's messages. Each is consumed once: one approval
// is one execution, and a different call (other arguments) pauses anew.
type Decisions struct {
	// mu guards the following.
	mu    sync.Mutex
	byID  map[string]*decision
	byKey map[string]*decision
}

type decision struct {
	approved bool
	used     bool
}

// ParseDecisions extracts the approval envelopes of msgs: tool_result
// blocks whose output is {"approved": bool} (or a JSON string holding
// one). Each is indexed by its toolCallId and by CallKey of the call's
// name and arguments, taken from the block or else from the tool_call
// block with the same id. A later decision for the same key replaces an
// earlier one. Other tool_result blocks are ignored.
func ParseDecisions(msgs []wire.Message) *Decisions {
	d := &Decisions{byID: map[string]*decision{}, byKey: map[string]*decision{}}
	type shape struct {
		name string
		args json.RawMessage
	}
	calls := map[string]shape{}
	for _, m := range msgs {
		for _, b := range m.Content.Blocks {
			if b.Type == "tool_call" && b.ToolCallID != "" {
				calls[b.ToolCallID] = shape{b.ToolName, b.Input}
			}
		}
	}
	for _, m := range msgs {
		for _, b := range m.Content.Blocks {
			if b.Type != wire.EventToolResult {
				continue
			}
			approved, ok := approval(b.Output)
			if !ok {
				continue
			}
			dec := &decision{approved: approved}
			if b.ToolCallID != "" {
				d.byID[b.ToolCallID] = dec
			}
			name, args := b.ToolName, b.Input
			if c, ok := calls[b.ToolCallID]; ok && b.ToolCallID != "" {
				if name == "" {
					name = c.name
				}
				if len(args) == 0 {
					args = c.args
				}
			}
			if key, ok := CallKey(name, args); ok {
				d.byKey[key] = dec
			}
		}
	}
	return d
}

// approval reads an {"approved": bool} envelope, also when the output is
// that object encoded as a JSON string.
func approval(out json.RawMessage) (approved, ok bool) {
	if len(out) > 0 && out[0] == '"' {
		var s string
		if json.Unmarshal(out, &s) != nil {
			return false, false
		}
		out = json.RawMessage(s)
	}
	var env struct {
		Approved *bool `json:"approved"`
	}
	if len(out) == 0 || out[0] != '{' || json.Unmarshal(out, &env) != nil || env.Approved == nil {
		return false, false
	}
	return *env.Approved, true
}

// Add records a decision arriving out of band (the /v1 interactions
// route) for a call id and, when name is set, for its call key.
func (d *Decisions) Add(toolCallID, name string, args []byte, approved bool) {
	dec := &decision{approved: approved}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byID == nil {
		d.byID, d.byKey = map[string]*decision{}, map[string]*decision{}
	}
	if toolCallID != "" {
		d.byID[toolCallID] = dec
	}
	if key, ok := CallKey(name, args); ok {
		d.byKey[key] = dec
	}
}

// Take returns and consumes the stored decision for c: by its call id
// first, else by its call key. ok is false when there is none left.
func (d *Decisions) Take(c Call) (approved, ok bool) {
	if d == nil {
		return false, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dec := d.byID[c.ToolCallID]
	if c.ToolCallID == "" || dec == nil || dec.used {
		dec = nil
		if key, ok := CallKey(c.Tool, c.Args); ok {
			dec = d.byKey[key]
		}
	}
	if dec == nil || dec.used {
		return false, false
	}
	dec.used = true
	return dec.approved, true
}

// Len returns how many decisions are left unconsumed.
func (d *Decisions) Len() int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[*decision]bool{}
	for _, m := range []map[string]*decision{d.byID, d.byKey} {
		for _, dec := range m {
			if !dec.used {
				seen[dec] = true
			}
		}
	}
	return len(seen)
}
