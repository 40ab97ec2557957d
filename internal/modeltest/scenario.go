package modeltest

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// API is a provider wire API.
type API string

const (
	ChatCompletions API = "chat"      // OpenAI Chat Completions
	Responses       API = "responses" // OpenAI Responses
	Messages        API = "messages"  // Anthropic Messages
	Gemini          API = "gemini"    // Gemini generateContent
)

// Kind is what an endpoint is for.
type Kind string

const (
	KindModel       Kind = "model"        // a completion: the script answers it
	KindCountTokens Kind = "count_tokens" // count_tokens / countTokens
	KindModels      Kind = "models"       // a model listing
)

// Request is one model call, reduced to what a script decides on.
type Request struct {
	API    API
	Kind   Kind
	Model  string
	Stream bool
	// Text is the last real user text: the last text part of the last user
	// message, with harness wrapper blocks (<system-reminder>…,
	// <environment_context>…, <session_context>…) skipped.
	Text string
	// ToolResults are the outputs of the tool results that came back after
	// Text, in order. Empty means no tool has run yet this turn.
	ToolResults []string
	// Tools are the tools the request offers.
	Tools []Tool
	// Escalate is the server's setting for Codex's exec_command (see
	// ShellCall): true unless the server was made WithoutEscalation.
	Escalate bool
	// Aux names an auxiliary call the server answers itself: "title",
	// "suggestion", "quota" or "json" (a structured-output side call).
	// Empty for a turn's own model call.
	Aux string
}

// Tool is one tool a request offers.
type Tool struct {
	Name   string
	Schema json.RawMessage // JSON schema of the arguments; may be null
}

// Reply is a script's answer to one model call.
type Reply struct {
	// Text is streamed first, in several deltas.
	Text string
	// ToolCalls follow the text. The reply then ends with the API's
	// tool-use stop reason.
	ToolCalls []ToolCall
	// Err, when set, fails the call with an HTTP error in the API's shape
	// instead of a reply.
	Err *Error
	// Delay holds the reply back, before any byte is written. The wait ends
	// early when the client goes away.
	Delay time.Duration
}

// ToolCall is one tool call in a reply.
type ToolCall struct {
	ID   string // generated when empty
	Name string
	Args json.RawMessage // a JSON object; {} when empty
}

// Error is an HTTP error the server answers with.
type Error struct {
	Status  int
	Message string
}

// ShellCommand is the command the default scenario runs.
const ShellCommand = "echo hi > out.txt"

// Default is the scenario used when a test scripts none:
//   - text containing "tool" and no tool result yet: one shell tool call
//     running ShellCommand (see ShellCall); plain text if no shell tool is
//     offered;
//   - text containing "tool" after a tool result: "DONE tool ran";
//   - anything else: "PONG <text>".
func Default(r Request) Reply {
	if strings.Contains(r.Text, "tool") {
		if len(r.ToolResults) > 0 {
			return Reply{Text: "DONE tool ran"}
		}
		if c, ok := ShellCall(r, ShellCommand); ok {
			return Reply{ToolCalls: []ToolCall{c}}
		}
	}
	return Reply{Text: "PONG " + r.Text}
}

// shellTools are the names harnesses give their shell tool, in the order
// they are looked for: Pi, Claude, generic, Codex, Gemini.
var shellTools = []string{"bash", "Bash", "shell", "exec_command", "run_shell_command"}

// ShellCall builds a call of the request's shell tool running command, with
// arguments shaped from the tool's schema: "command" as a string or an
// argv array, or "cmd". When r.Escalate is set and the schema offers
// sandbox_permissions (Codex's exec_command), the call asks for
// require_escalated with a justification: Codex's own sandbox cannot start
// in every container, and an escalated command runs outside it after a
// permission request. It reports false when no shell tool is offered.
func ShellCall(r Request, command string) (ToolCall, bool) {
	for _, name := range shellTools {
		for _, t := range r.Tools {
			if t.Name == name {
				return ToolCall{Name: name, Args: shellArgs(t.Schema, command, r.Escalate)}, true
			}
		}
	}
	return ToolCall{}, false
}

func shellArgs(schema json.RawMessage, command string, escalate bool) json.RawMessage {
	var s struct {
		Properties map[string]struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	args := map[string]any{}
	p, hasCommand := s.Properties["command"]
	_, hasCmd := s.Properties["cmd"]
	switch {
	case hasCommand && typeIs(p.Type, "array"):
		args["command"] = []string{"bash", "-lc", command}
	case hasCmd && !hasCommand:
		args["cmd"] = command
	default:
		args["command"] = command
	}
	if _, ok := s.Properties["sandbox_permissions"]; ok && escalate {
		args["sandbox_permissions"] = "require_escalated"
		args["justification"] = "Write out.txt as the test asks."
	}
	return marshal(args)
}

// marshal encodes v as JSON without HTML escaping, so "echo hi > out.txt"
// reads as it is written.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // every value here is built from maps, slices and strings
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// typeIs reports whether a JSON schema "type" (a string or a list, any
// case: Gemini's schemas say "ARRAY") includes want.
func typeIs(t any, want string) bool {
	switch v := t.(type) {
	case string:
		return strings.EqualFold(v, want)
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && strings.EqualFold(s, want) {
				return true
			}
		}
	}
	return false
}

// auxReply answers an auxiliary call; schema is a structured-output
// call's JSON schema.
func auxReply(r Request, schema any) Reply {
	switch r.Aux {
	case "title":
		return Reply{Text: "Fake session title"}
	case "json":
		return Reply{Text: string(marshal(fromSchema(schema, "")))}
	}
	return Reply{Text: "ok"}
}

// fromSchema builds a small value that satisfies a JSON schema: objects get
// every property, enums their first value (a "next_speaker" field says
// "user", so Gemini's next-speaker check ends the turn), strings a short
// text ("Fake session title" for a title).
func fromSchema(schema any, key string) any {
	m, _ := schema.(map[string]any)
	if m == nil {
		return "fake"
	}
	if enum, ok := m["enum"].([]any); ok && len(enum) > 0 {
		if key == "next_speaker" {
			for _, e := range enum {
				if e == "user" {
					return e
				}
			}
		}
		return enum[0]
	}
	t := m["type"]
	if l, ok := t.([]any); ok && len(l) > 0 {
		t = l[0]
	}
	ts, _ := t.(string)
	switch strings.ToLower(ts) {
	case "object", "":
		props, _ := m["properties"].(map[string]any)
		if props == nil && ts == "" {
			return "fake"
		}
		out := map[string]any{}
		for k, v := range props {
			out[k] = fromSchema(v, k)
		}
		return out
	case "array":
		return []any{}
	case "integer", "number":
		return 0
	case "boolean":
		return false
	}
	if key == "title" {
		return "Fake session title"
	}
	return "fake"
}

// wrapped reports whether a text part is a harness wrapper block rather
// than what the user typed: a whole <tag>…</tag> element, or Codex's
// AGENTS.md preamble.
func wrapped(text string) bool {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "# AGENTS.md instructions") {
		return true
	}
	if !strings.HasPrefix(t, "<") {
		return false
	}
	end := strings.IndexAny(t, " >\n")
	if end < 2 {
		return false
	}
	tag := t[1:end]
	return strings.HasSuffix(t, "</"+tag+">")
}

// lastReal returns the last part that is not a wrapper, or "".
func lastReal(parts []string) string {
	for i := len(parts) - 1; i >= 0; i-- {
		if strings.TrimSpace(parts[i]) != "" && !wrapped(parts[i]) {
			return parts[i]
		}
	}
	return ""
}
