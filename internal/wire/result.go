package wire

import "encoding/json"

// Result is the outcome of one turn (docs/contract.md, The result and events).
type Result struct {
	OK           bool          `json:"ok"`
	Output       string        `json:"output,omitempty"`
	Messages     []OutMessage  `json:"messages"`
	Events       []Event       `json:"events"`
	Usage        *Usage        `json:"usage,omitempty"`
	StopReason   string        `json:"stopReason,omitempty"`
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	SessionID    string        `json:"sessionId,omitempty"`
	TurnID       string        `json:"turnId,omitempty"`
	Model        string        `json:"model,omitempty"`
	TraceID      string        `json:"traceId,omitempty"`
	Error        string        `json:"error,omitempty"`
}

// OutMessage is an assistant message of the result.
type OutMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Usage is token and cost accounting for a turn.
type Usage struct {
	Input  int64   `json:"input"`
	Output int64   `json:"output"`
	Total  int64   `json:"total"`
	Cost   float64 `json:"cost"`
}

// Capabilities are what the harness can do (docs/contract.md, The result and events).
type Capabilities struct {
	TextMessages     bool `json:"textMessages"`
	Images           bool `json:"images"`
	FileAttachments  bool `json:"fileAttachments"`
	MCPTools         bool `json:"mcpTools"`
	ToolCalls        bool `json:"toolCalls"`
	Reasoning        bool `json:"reasoning"`
	PlanMode         bool `json:"planMode"`
	Permissions      bool `json:"permissions"`
	Usage            bool `json:"usage"`
	StreamingDeltas  bool `json:"streamingDeltas"`
	SessionLifecycle bool `json:"sessionLifecycle"`
}

// Event is one event of a turn (docs/contract.md, The result and events). Only the fields of its
// type are set. Input and Output are raw because their shape depends on
// the type: a tool's arguments and text output, or a usage event's counts.
type Event struct {
	Type       string          `json:"type"`
	ID         string          `json:"id,omitempty"`
	Delta      string          `json:"delta,omitempty"`
	Text       string          `json:"text,omitempty"`
	Role       string          `json:"role,omitempty"` // message events in the session log: user or assistant
	Name       string          `json:"name,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	Denied     bool            `json:"denied,omitempty"`
	Transient  bool            `json:"transient,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	Message    string          `json:"message,omitempty"`
	StopReason string          `json:"stopReason,omitempty"`
	TraceID    string          `json:"traceId,omitempty"`
	// render hints of tool_call/tool_result (the tool spec's render)
	Render json.RawMessage `json:"render,omitempty"`
	// file events
	URL       string `json:"url,omitempty"`
	MediaType string `json:"mediaType,omitempty"`
	// attachment_delivery events
	AttachmentID string   `json:"attachmentId,omitempty"`
	Outcome      string   `json:"outcome,omitempty"`
	ReasonCode   string   `json:"reasonCode,omitempty"`
	WorkingPath  string   `json:"workingPath,omitempty"`
	Total        *int64   `json:"total,omitempty"`
	Cost         *float64 `json:"cost,omitempty"`
}

// UsageEvent builds a usage event from counters.
func UsageEvent(u Usage) Event {
	in, _ := json.Marshal(u.Input)
	out, _ := json.Marshal(u.Output)
	total, cost := u.Total, u.Cost
	return Event{Type: EventUsage, Input: in, Output: out, Total: &total, Cost: &cost}
}

// ToolResultEvent builds a tool_result event with text output.
func ToolResultEvent(id, output string, data json.RawMessage, isError bool) Event {
	out, _ := json.Marshal(output)
	return Event{Type: EventToolResult, ID: id, Output: out, Data: data, IsError: isError}
}

// DataEvent builds a data event; v must marshal.
func DataEvent(name string, v any, transient bool) Event {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("null")
	}
	return Event{Type: EventData, Name: name, Data: b, Transient: transient}
}

// Record is one NDJSON line of a stream: an event, a keep-alive ping or the
// terminal result. Seq numbers events within a session when the runner
// keeps an event log.
type Record struct {
	Kind   string  `json:"kind"`
	Seq    int64   `json:"seq,omitempty"`
	Event  *Event  `json:"event,omitempty"`
	Result *Result `json:"result,omitempty"`
}

// Record kinds.
const (
	RecordEvent  = "event"
	RecordResult = "result"
	RecordPing   = "ping"
)

// Event types (docs/contract.md, The result and events).
const (
	// EventMessage is a coalesced message, kept in the session's event log
	// (the user's prompt, the assistant's whole answer) and never streamed
	// beside the message_* family for the same text.
	EventMessage        = "message"
	EventMessageStart   = "message_start"
	EventMessageDelta   = "message_delta"
	EventMessageEnd     = "message_end"
	EventThoughtStart   = "thought_start"
	EventThoughtDelta   = "thought_delta"
	EventThoughtEnd     = "thought_end"
	EventToolCall       = "tool_call"
	EventToolResult     = "tool_result"
	EventInteractionReq = "interaction_request"
	EventInteractionRes = "interaction_response"
	EventData           = "data"
	EventUsage          = "usage"
	EventError          = "error"
	EventDone           = "done"
	EventFile           = "file"
	EventAttachment     = "attachment_delivery"
)
