package acp

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/agentrunner/runner/internal/wire"
)

// mapper turns one turn's session/update notifications into wire events.
// Streaming text is framed as start/delta/end; a block ends when another
// kind of update arrives or the turn ends.
type mapper struct {
	open     string // "", "message" or "thought"
	openID   string
	blockSeq int
	tools    map[string]*toolState
	retained int // bytes of names and inputs the tools hold
}

type toolState struct {
	name     string
	input    json.RawMessage // nil once finished, or past the budget
	inputSum uint64          // of the last input, to tell new arguments
	finished bool
}

// A turn's tool states are bounded whatever the harness sends: finished
// calls drop their input, the names and inputs kept stay within
// maxRetained (past it a call's state keeps neither), and past maxTools
// states the finished ones, then any, are forgotten. A forgotten call
// that reappears is taken for a new one (a tool_call before its result).
const (
	maxTools    = 4096
	maxRetained = 8 << 20
)

func newMapper() *mapper { return &mapper{tools: map[string]*toolState{}} }

// state is the call's state, made (within maxTools) when first seen.
func (m *mapper) state(id string) (st *toolState, seen bool) {
	if st, ok := m.tools[id]; ok {
		return st, true
	}
	if len(m.tools) >= maxTools {
		for _, finishedOnly := range []bool{true, false} {
			for k, old := range m.tools {
				if len(m.tools) < maxTools/2 {
					break
				}
				if old.finished || !finishedOnly {
					m.retained -= len(old.name) + len(old.input)
					delete(m.tools, k)
				}
			}
		}
	}
	st = &toolState{}
	m.tools[id] = st
	return st, false
}

// keep sets the call's name and input within the budget.
func (m *mapper) keep(st *toolState, name string, input json.RawMessage) {
	m.retained -= len(st.name) + len(st.input)
	st.name, st.input = "", nil
	if m.retained+len(name)+len(input) > maxRetained {
		return
	}
	st.name, st.input = name, input
	m.retained += len(name) + len(input)
}

func inputSum(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64() | 1 // never 0, which is "no input yet"
}

type update struct {
	SessionUpdate string          `json:"sessionUpdate"`
	Content       json.RawMessage `json:"content"`
	MessageID     string          `json:"messageId"`
	ToolCallID    string          `json:"toolCallId"`
	Title         string          `json:"title"`
	Kind          string          `json:"kind"`
	Status        string          `json:"status"`
	RawInput      json.RawMessage `json:"rawInput"`
	RawOutput     json.RawMessage `json:"rawOutput"`
}

type contentBlock struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Data     string `json:"data"`
	MimeType string `json:"mimeType"`
	URI      string `json:"uri"`
}

func (m *mapper) update(raw json.RawMessage) []wire.Event {
	var u update
	if err := json.Unmarshal(raw, &u); err != nil {
		return []wire.Event{{Type: wire.EventData, Name: "acp.malformed_update", Data: raw}}
	}
	switch u.SessionUpdate {
	case "agent_message_chunk":
		return m.chunk("message", u)
	case "agent_thought_chunk":
		return m.chunk("thought", u)
	case "tool_call":
		return append(m.close(), m.toolCall(u, true)...)
	case "tool_call_update":
		return append(m.close(), m.toolCall(u, false)...)
	}
	// Everything else (plan, mode and command updates, usage_update, and
	// variants this client has never heard of) passes through as data.
	name := u.SessionUpdate
	if name == "" {
		name = "unknown"
	}
	return []wire.Event{{Type: wire.EventData, Name: "acp." + name, Data: raw}}
}

func (m *mapper) chunk(kind string, u update) []wire.Event {
	var c contentBlock
	_ = json.Unmarshal(u.Content, &c)
	if c.Type != "" && c.Type != "text" {
		// A file the agent produced (an image it drew, a link to a file
		// it wrote) is a file event, as the wire defines it.
		if f, ok := fileEvent(kind, c); ok {
			return append(m.close(), f)
		}
		return []wire.Event{{Type: wire.EventData, Name: "acp." + u.SessionUpdate, Data: u.Content}}
	}
	var out []wire.Event
	if m.open != kind || (u.MessageID != "" && u.MessageID != m.openID) {
		out = append(out, m.close()...)
		m.blockSeq++
		m.open = kind
		m.openID = u.MessageID
		if m.openID == "" {
			m.openID = kind[:1] + strconv.Itoa(m.blockSeq)
		}
		out = append(out, wire.Event{Type: kind + "_start", ID: m.openID})
	}
	if c.Text != "" {
		out = append(out, wire.Event{Type: kind + "_delta", ID: m.openID, Delta: c.Text})
	}
	return out
}

func (m *mapper) close() []wire.Event {
	if m.open == "" {
		return nil
	}
	ev := wire.Event{Type: m.open + "_end", ID: m.openID}
	m.open, m.openID = "", ""
	return []wire.Event{ev}
}

func (m *mapper) toolCall(u update, initial bool) []wire.Event {
	var out []wire.Event
	st, seen := m.state(u.ToolCallID)
	name, input := st.name, st.input
	if u.Title != "" && (name == "" || initial) {
		name = u.Title
	}
	grew := false
	if len(u.RawInput) > 0 && string(u.RawInput) != "null" {
		if sum := inputSum(u.RawInput); sum != st.inputSum {
			st.inputSum, input, grew = sum, u.RawInput, true
		}
	}
	m.keep(st, name, input)
	// A tool_call, a tool_call_update with new arguments, or an update
	// for a call never announced (Gemini does this) yields a tool_call.
	if initial || grew || !seen {
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		out = append(out, wire.Event{Type: wire.EventToolCall, ID: u.ToolCallID, Name: name, Input: input})
	}
	if (u.Status == "completed" || u.Status == "failed") && !st.finished {
		st.finished = true
		m.keep(st, st.name, nil) // a finished call is asked nothing more
		out = append(out, wire.ToolResultEvent(u.ToolCallID, toolOutput(u), rawOrNil(u.RawOutput), u.Status == "failed"))
	}
	return out
}

func (m *mapper) toolName(id string) string {
	if st, ok := m.tools[id]; ok {
		return st.name
	}
	return ""
}

func (m *mapper) toolInput(id string) json.RawMessage {
	if st, ok := m.tools[id]; ok {
		return st.input
	}
	return nil
}

func rawOrNil(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

// toolOutput renders a tool call's result as the text a model saw.
func toolOutput(u update) string {
	var items []struct {
		Type    string       `json:"type"`
		Content contentBlock `json:"content"`
		Path    string       `json:"path"`
	}
	_ = json.Unmarshal(u.Content, &items)
	var b strings.Builder
	for _, it := range items {
		switch it.Type {
		case "content":
			if it.Content.Type == "text" {
				b.WriteString(it.Content.Text)
			}
		case "diff":
			b.WriteString("edited " + it.Path + "\n")
		}
	}
	if b.Len() == 0 && len(u.RawOutput) > 0 && string(u.RawOutput) != "null" {
		var s string
		if json.Unmarshal(u.RawOutput, &s) == nil {
			return s
		}
		return string(u.RawOutput)
	}
	return b.String()
}

// fileEvent maps an agent message's image or resource_link block to a
// file event: inline images as a data URL.
func fileEvent(kind string, c contentBlock) (wire.Event, bool) {
	if kind != "message" || c.MimeType == "" {
		return wire.Event{}, false
	}
	switch {
	case c.Type == "image" && c.Data != "":
		return wire.Event{Type: wire.EventFile, URL: "data:" + c.MimeType + ";base64," + c.Data, MediaType: c.MimeType}, true
	case c.Type == "resource_link" && c.URI != "":
		return wire.Event{Type: wire.EventFile, URL: c.URI, MediaType: c.MimeType}, true
	}
	return wire.Event{}, false
}
