package modeltest

import (
	"encoding/json"
	"strings"
)

// parse reduces a request body to a Request, and returns the JSON schema
// of a structured-output call (nil for others). It is lenient: a field of
// an unexpected shape is skipped, never an error, so a harness upgrade that
// adds fields does not break tests.
func parse(rt route, body map[string]any) (Request, any) {
	var r Request
	var schema any
	switch rt.api {
	case ChatCompletions:
		r, schema = parseChat(body)
	case Responses:
		r, schema = parseResponses(body)
	case Messages:
		r, schema = parseMessages(body)
	case Gemini:
		r, schema = parseGemini(body)
		r.Model, r.Stream = rt.model, rt.sse
	}
	r.API = rt.api
	switch {
	case r.Aux != "":
	case schema != nil:
		r.Aux = "json"
	case strings.Contains(systemText(rt.api, body), "You are a title generator"):
		r.Aux = "title" // opencode's title call, on every API
	}
	return r, schema
}

// systemText joins a request's system instructions.
func systemText(api API, b map[string]any) string {
	var parts []string
	switch api {
	case ChatCompletions:
		for _, m := range list(b["messages"]) {
			if role := str(obj(m)["role"]); role == "system" || role == "developer" {
				parts = append(parts, textParts(obj(m)["content"], "text")...)
			}
		}
	case Responses:
		parts = append(parts, str(b["instructions"]))
		for _, it := range list(b["input"]) {
			if role := str(obj(it)["role"]); role == "system" || role == "developer" {
				parts = append(parts, textParts(obj(it)["content"], "input_text", "text")...)
			}
		}
	case Messages:
		parts = textParts(b["system"], "text")
	case Gemini:
		for _, p := range list(obj(b["systemInstruction"])["parts"]) {
			parts = append(parts, str(obj(p)["text"]))
		}
	}
	return strings.Join(parts, "\n")
}

// conversation collects a request's messages in a common form while a
// parser walks them.
type conversation struct {
	text    string
	results []string
}

// user sees a user message's text parts: a real text starts a new turn.
func (c *conversation) user(parts []string) {
	if t := lastReal(parts); t != "" {
		c.text, c.results = t, nil
	}
}

func (c *conversation) result(output string) { c.results = append(c.results, output) }

// --- OpenAI Chat Completions ---

func parseChat(b map[string]any) (Request, any) {
	r := Request{Model: str(b["model"]), Stream: b["stream"] == true}
	var c conversation
	for _, m := range list(b["messages"]) {
		msg := obj(m)
		switch str(msg["role"]) {
		case "user":
			c.user(textParts(msg["content"], "text"))
		case "tool":
			c.result(strings.Join(textParts(msg["content"], "text"), ""))
		}
	}
	r.Text, r.ToolResults = c.text, c.results
	for _, t := range list(b["tools"]) {
		f := obj(obj(t)["function"])
		if name := str(f["name"]); name != "" {
			r.Tools = append(r.Tools, Tool{Name: name, Schema: raw(f["parameters"])})
		}
	}
	var schema any
	if rf := obj(b["response_format"]); str(rf["type"]) == "json_schema" {
		schema = obj(rf["json_schema"])["schema"]
	}
	return r, schema
}

// --- OpenAI Responses ---

func parseResponses(b map[string]any) (Request, any) {
	r := Request{Model: str(b["model"]), Stream: b["stream"] == true}
	var c conversation
	if s, ok := b["input"].(string); ok {
		c.user([]string{s})
	}
	for _, it := range list(b["input"]) {
		item := obj(it)
		typ := str(item["type"])
		switch {
		case (typ == "message" || typ == "") && str(item["role"]) == "user":
			c.user(textParts(item["content"], "input_text", "text"))
		case typ == "function_call_output" || typ == "custom_tool_call_output":
			if s, ok := item["output"].(string); ok {
				c.result(s)
			} else {
				c.result(strings.Join(textParts(item["output"], "input_text", "output_text", "text"), ""))
			}
		}
	}
	r.Text, r.ToolResults = c.text, c.results
	var addTools func([]any)
	addTools = func(ts []any) {
		for _, t := range ts {
			tool := obj(t)
			switch str(tool["type"]) {
			case "function":
				r.Tools = append(r.Tools, Tool{Name: str(tool["name"]), Schema: raw(tool["parameters"])})
			case "namespace":
				addTools(list(tool["tools"]))
			}
		}
	}
	addTools(list(b["tools"]))
	var schema any
	if f := obj(obj(b["text"])["format"]); str(f["type"]) == "json_schema" {
		schema = f["schema"]
		if schema == nil {
			schema = map[string]any{}
		}
	}
	return r, schema
}

// --- Anthropic Messages ---

func parseMessages(b map[string]any) (Request, any) {
	r := Request{Model: str(b["model"]), Stream: b["stream"] == true}
	var c conversation
	for _, m := range list(b["messages"]) {
		msg := obj(m)
		if str(msg["role"]) != "user" {
			continue
		}
		if s, ok := msg["content"].(string); ok {
			c.user([]string{s})
			continue
		}
		var texts []string
		results := false
		for _, bl := range list(msg["content"]) {
			block := obj(bl)
			switch str(block["type"]) {
			case "text":
				texts = append(texts, str(block["text"]))
			case "tool_result":
				results = true
				if s, ok := block["content"].(string); ok {
					c.result(s)
				} else {
					c.result(strings.Join(textParts(block["content"], "text"), ""))
				}
			}
		}
		// A message that carries tool results continues the turn; its
		// text blocks are harness notes, not a new prompt.
		if !results {
			c.user(texts)
		}
	}
	r.Text, r.ToolResults = c.text, c.results
	for _, t := range list(b["tools"]) {
		tool := obj(t)
		if name := str(tool["name"]); name != "" {
			r.Tools = append(r.Tools, Tool{Name: name, Schema: raw(tool["input_schema"])})
		}
	}
	switch {
	case strings.HasPrefix(strings.TrimSpace(r.Text), "[SUGGESTION MODE:"):
		r.Aux = "suggestion"
	case r.Text == "quota" && num(b["max_tokens"]) == 1:
		r.Aux = "quota"
	}
	var schema any
	if f := obj(obj(b["output_config"])["format"]); str(f["type"]) == "json_schema" {
		schema = f["schema"]
	}
	return r, schema
}

// --- Gemini ---

func parseGemini(b map[string]any) (Request, any) {
	var r Request
	var c conversation
	for _, ct := range list(b["contents"]) {
		content := obj(ct)
		if role := str(content["role"]); role != "user" && role != "" {
			continue
		}
		var texts []string
		results := false
		for _, p := range list(content["parts"]) {
			part := obj(p)
			if fr := obj(part["functionResponse"]); fr != nil {
				results = true
				resp := obj(fr["response"])
				if s, ok := resp["output"].(string); ok {
					c.result(s)
				} else {
					c.result(string(raw(resp)))
				}
				continue
			}
			if t, ok := part["text"].(string); ok && part["thought"] != true {
				texts = append(texts, t)
			}
		}
		if !results {
			c.user(texts)
		}
	}
	r.Text, r.ToolResults = c.text, c.results
	for _, t := range list(b["tools"]) {
		for _, d := range list(obj(t)["functionDeclarations"]) {
			decl := obj(d)
			schema := decl["parametersJsonSchema"]
			if schema == nil {
				schema = decl["parameters"]
			}
			if name := str(decl["name"]); name != "" {
				r.Tools = append(r.Tools, Tool{Name: name, Schema: raw(schema)})
			}
		}
	}
	var schema any
	gc := obj(b["generationConfig"])
	if str(gc["responseMimeType"]) == "application/json" {
		schema = gc["responseJsonSchema"]
		if schema == nil {
			schema = gc["responseSchema"]
		}
		if schema == nil {
			schema = map[string]any{}
		}
	}
	return r, schema
}

// --- loose JSON access ---

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }
func list(v any) []any         { l, _ := v.([]any); return l }
func str(v any) string         { s, _ := v.(string); return s }
func num(v any) float64        { f, _ := v.(float64); return f }

func raw(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// textParts returns the texts of a content value: a string, or a list of
// parts whose type is one of types.
func textParts(content any, types ...string) []string {
	if s, ok := content.(string); ok {
		return []string{s}
	}
	var out []string
	for _, p := range list(content) {
		part := obj(p)
		for _, t := range types {
			if str(part["type"]) == t {
				out = append(out, str(part["text"]))
				break
			}
		}
	}
	return out
}
