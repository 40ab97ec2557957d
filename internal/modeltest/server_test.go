package modeltest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/modeltest"
	"github.com/google/go-cmp/cmp"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	Name string // the "event:" line; "" when there was none
	Data string
}

// readSSE parses an event stream strictly: every line is "event: X" or
// "data: Y" (one data line per event here), every event ends with a blank
// line, and nothing follows the last one.
func readSSE(t *testing.T, resp *http.Response) []sseEvent {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q, want text/event-stream", ct)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	var events []sseEvent
	for i, block := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		var ev sseEvent
		sc := bufio.NewScanner(strings.NewReader(block))
		sawData := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: ") && !sawData && ev.Name == "":
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && !sawData:
				ev.Data, sawData = strings.TrimPrefix(line, "data: "), true
			default:
				t.Fatalf("event %d: unexpected line %q in %q", i, line, block)
			}
		}
		if !sawData {
			t.Fatalf("event %d has no data line: %q", i, block)
		}
		events = append(events, ev)
	}
	return events
}

func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decode(t *testing.T, data string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("data is not a JSON object: %v: %q", err, data)
	}
	return m
}

// result is a reply as a client reassembles it.
type result struct {
	Text  string
	Calls []call
	Stop  string
}

type call struct {
	Name string
	Args map[string]any
}

func args(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("tool arguments %q: %v", s, err)
	}
	return m
}

func readError(t *testing.T, resp *http.Response, status int) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d", resp.StatusCode, status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

var shellWant = []call{{Name: "", Args: map[string]any{"command": "echo hi > out.txt"}}}

func withName(calls []call, name string) []call {
	out := append([]call(nil), calls...)
	for i := range out {
		out[i].Name = name
	}
	return out
}

// --- OpenAI Chat Completions ---

// chatClient reads a chat completions stream the way the openai SDK does,
// checking the chunk order the reference describes.
func chatClient(t *testing.T, events []sseEvent) result {
	t.Helper()
	if last := events[len(events)-1]; last.Data != "[DONE]" || last.Name != "" {
		t.Fatalf("last event = %+v, want data: [DONE]", last)
	}
	events = events[:len(events)-1]
	var r result
	argsBuf := map[int]*strings.Builder{}
	names := map[int]string{}
	usage := false
	for i, ev := range events {
		if ev.Name != "" {
			t.Fatalf("chat chunk %d has an event line %q", i, ev.Name)
		}
		c := decode(t, ev.Data)
		if c["object"] != "chat.completion.chunk" || c["id"] == nil {
			t.Fatalf("chunk %d: %s", i, ev.Data)
		}
		choices := c["choices"].([]any)
		if len(choices) == 0 {
			if c["usage"] == nil || i != len(events)-1 {
				t.Fatalf("chunk %d with no choices must be the final usage chunk: %s", i, ev.Data)
			}
			usage = true
			continue
		}
		ch := choices[0].(map[string]any)
		delta := ch["delta"].(map[string]any)
		if i == 0 {
			if diff := cmp.Diff(map[string]any{"role": "assistant", "content": ""}, delta); diff != "" {
				t.Fatalf("first delta (-want +got):\n%s", diff)
			}
		}
		if s, ok := delta["content"].(string); ok {
			r.Text += s
		}
		for _, tc := range asList(delta["tool_calls"]) {
			tcm := tc.(map[string]any)
			idx := int(tcm["index"].(float64))
			f := tcm["function"].(map[string]any)
			if _, ok := argsBuf[idx]; !ok {
				if tcm["id"] == nil || tcm["type"] != "function" || f["arguments"] != "" {
					t.Fatalf("first tool_calls delta must carry id, type and empty arguments: %s", ev.Data)
				}
				argsBuf[idx] = &strings.Builder{}
				names[idx] = f["name"].(string)
			}
			argsBuf[idx].WriteString(f["arguments"].(string))
		}
		if fr, ok := ch["finish_reason"].(string); ok {
			r.Stop = fr
		}
	}
	if !usage {
		t.Fatal("no usage chunk")
	}
	for i := 0; i < len(argsBuf); i++ {
		r.Calls = append(r.Calls, call{Name: names[i], Args: args(t, argsBuf[i].String())})
	}
	return r
}

func asList(v any) []any { l, _ := v.([]any); return l }

func chatBody(messages ...any) map[string]any {
	return map[string]any{
		"model": "fake-model", "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": append([]any{map[string]any{"role": "system", "content": "be brief"}}, messages...),
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "read", "parameters": map[string]any{"type": "object"},
		}}, map[string]any{"type": "function", "function": map[string]any{
			"name":       "bash",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}},
		}}},
	}
}

func userParts(text string) map[string]any {
	return map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}}
}

func TestChatCompletions(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t)
	url := srv.OpenAIBaseURL() + "/chat/completions"

	t.Run("text", func(t *testing.T) {
		got := chatClient(t, readSSE(t, post(t, url, chatBody(userParts("hello there")))))
		if diff := cmp.Diff(result{Text: "PONG hello there", Stop: "stop"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("tool call", func(t *testing.T) {
		got := chatClient(t, readSSE(t, post(t, url, chatBody(userParts("use a tool")))))
		if diff := cmp.Diff(result{Calls: withName(shellWant, "bash"), Stop: "tool_calls"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("after tool result", func(t *testing.T) {
		body := chatBody(userParts("use a tool"),
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"echo hi > out.txt"}`},
			}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "(no output)"})
		got := chatClient(t, readSSE(t, post(t, url, body)))
		if diff := cmp.Diff(result{Text: "DONE tool ran", Stop: "stop"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("not streaming", func(t *testing.T) {
		body := chatBody(map[string]any{"role": "user", "content": "plain"})
		body["stream"] = false
		resp := post(t, url, body)
		defer resp.Body.Close()
		var got struct {
			Object  string `json:"object"`
			Choices []struct {
				Message      map[string]any `json:"message"`
				FinishReason string         `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Object != "chat.completion" || got.Choices[0].Message["content"] != "PONG plain" || got.Choices[0].FinishReason != "stop" {
			t.Errorf("got %+v", got)
		}
	})

	errSrv := modeltest.New(t, modeltest.WithError(http.StatusBadRequest, "model fake-model does not exist"))
	t.Run("error", func(t *testing.T) {
		got := readError(t, post(t, errSrv.OpenAIBaseURL()+"/chat/completions", chatBody(userParts("hi"))), 400)
		want := map[string]any{"error": map[string]any{
			"message": "model fake-model does not exist", "type": "invalid_request_error", "param": nil, "code": nil,
		}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	calls := srv.Calls()
	if len(calls) != 4 {
		t.Fatalf("recorded %d calls, want 4", len(calls))
	}
	if c := calls[2]; c.Text != "use a tool" || !cmp.Equal(c.ToolResults, []string{"(no output)"}) {
		t.Errorf("third call recorded Text %q ToolResults %q", c.Text, c.ToolResults)
	}
	if h := calls[0].Header.Get("Authorization"); h != "Bearer test-key" {
		t.Errorf("recorded Authorization %q", h)
	}
	if calls[0].Path != "/v1/chat/completions" || calls[0].Body["model"] != "fake-model" {
		t.Errorf("recorded path %q body model %v", calls[0].Path, calls[0].Body["model"])
	}
}

// --- OpenAI Responses ---

// responsesClient reads a Responses stream: every event's name equals its
// data's type, sequence numbers count up from 0, and items open and close
// in order.
func responsesClient(t *testing.T, events []sseEvent) result {
	t.Helper()
	var r result
	var order []string
	open := map[float64]map[string]any{}
	argsBuf := map[float64]*strings.Builder{}
	for i, ev := range events {
		d := decode(t, ev.Data)
		if ev.Name == "" || d["type"] != ev.Name {
			t.Fatalf("event %d: name %q, data type %v", i, ev.Name, d["type"])
		}
		if d["sequence_number"] != float64(i) {
			t.Fatalf("event %d: sequence_number %v", i, d["sequence_number"])
		}
		order = append(order, ev.Name)
		switch ev.Name {
		case "response.output_item.added":
			item := d["item"].(map[string]any)
			open[d["output_index"].(float64)] = item
			if item["type"] == "function_call" {
				if item["arguments"] != "" || item["call_id"] == nil {
					t.Fatalf("function_call added with arguments or without call_id: %s", ev.Data)
				}
				argsBuf[d["output_index"].(float64)] = &strings.Builder{}
			}
		case "response.output_text.delta":
			if open[d["output_index"].(float64)]["id"] != d["item_id"] {
				t.Fatalf("delta for an item that is not open: %s", ev.Data)
			}
			r.Text += d["delta"].(string)
		case "response.output_text.done":
			if d["text"] != r.Text {
				t.Fatalf("output_text.done text %q, deltas %q", d["text"], r.Text)
			}
		case "response.function_call_arguments.delta":
			argsBuf[d["output_index"].(float64)].WriteString(d["delta"].(string))
		case "response.function_call_arguments.done":
			if got := argsBuf[d["output_index"].(float64)].String(); d["arguments"] != got {
				t.Fatalf("arguments.done %q, deltas %q", d["arguments"], got)
			}
		case "response.output_item.done":
			item := d["item"].(map[string]any)
			if item["status"] != "completed" || item["id"] != open[d["output_index"].(float64)]["id"] {
				t.Fatalf("output_item.done: %s", ev.Data)
			}
			if item["type"] == "function_call" {
				r.Calls = append(r.Calls, call{Name: item["name"].(string), Args: args(t, item["arguments"].(string))})
			}
		case "response.completed":
			resp := d["response"].(map[string]any)
			if resp["status"] != "completed" || resp["usage"].(map[string]any)["total_tokens"] == nil {
				t.Fatalf("completed: %s", ev.Data)
			}
			if i != len(events)-1 {
				t.Fatal("response.completed is not the last event")
			}
			r.Stop = "completed"
		}
	}
	if order[0] != "response.created" || order[1] != "response.in_progress" {
		t.Fatalf("stream starts %v", order[:2])
	}
	return r
}

func responsesBody(input ...any) map[string]any {
	return map[string]any{
		"model": "gpt-5.5", "stream": true, "tool_choice": "auto", "store": false,
		"instructions": "you are codex",
		"input": append([]any{
			map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "<permissions instructions>sandbox</permissions instructions>"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>be nice</INSTRUCTIONS>"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}}},
		}, input...),
		"tools": []any{
			map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{"type": "object", "properties": map[string]any{
				"cmd": map[string]any{"type": "string"}, "sandbox_permissions": map[string]any{"type": "string"}, "justification": map[string]any{"type": "string"},
			}}},
			map[string]any{"type": "function", "name": "write_stdin", "parameters": map[string]any{"type": "object"}},
		},
	}
}

func userInput(text string) map[string]any {
	return map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}
}

func TestResponses(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t)
	url := srv.OpenAIBaseURL() + "/responses"

	t.Run("text", func(t *testing.T) {
		events := readSSE(t, post(t, url, responsesBody(userInput("hello codex"))))
		got := responsesClient(t, events)
		if diff := cmp.Diff(result{Text: "PONG hello codex", Stop: "completed"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		var names []string
		for _, e := range events {
			names = append(names, e.Name)
		}
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
			"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
			"response.output_item.done", "response.completed"}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("event order (-want +got):\n%s", diff)
		}
	})
	t.Run("tool call", func(t *testing.T) {
		got := responsesClient(t, readSSE(t, post(t, url, responsesBody(userInput("run a tool please")))))
		want := result{Stop: "completed", Calls: []call{{Name: "exec_command", Args: map[string]any{
			"cmd": "echo hi > out.txt", "sandbox_permissions": "require_escalated", "justification": "Write out.txt as the test asks.",
		}}}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("after tool result", func(t *testing.T) {
		body := responsesBody(userInput("run a tool please"),
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": `{"cmd":"echo hi > out.txt"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "Process exited with code 0"})
		got := responsesClient(t, readSSE(t, post(t, url, body)))
		if diff := cmp.Diff(result{Text: "DONE tool ran", Stop: "completed"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("title side call", func(t *testing.T) {
		body := responsesBody(userInput("name this: run a tool"))
		body["model"] = "gpt-5.6-luna"
		body["tools"] = []any{}
		body["text"] = map[string]any{"format": map[string]any{"type": "json_schema", "name": "title", "strict": true, "schema": map[string]any{
			"type": "object", "properties": map[string]any{"title": map[string]any{"type": "string"}}, "required": []any{"title"},
		}}}
		got := responsesClient(t, readSSE(t, post(t, url, body)))
		if got.Text != `{"title":"Fake session title"}` {
			t.Errorf("title reply %q", got.Text)
		}
	})

	errSrv := modeltest.New(t, modeltest.WithError(http.StatusUnauthorized, "bad key"))
	t.Run("error", func(t *testing.T) {
		got := readError(t, post(t, errSrv.OpenAIBaseURL()+"/responses", responsesBody(userInput("hi"))), 401)
		want := map[string]any{"error": map[string]any{"message": "bad key", "type": "authentication_error", "param": nil, "code": nil}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	calls := srv.Calls()
	if len(calls) != 3 {
		t.Fatalf("recorded %d script calls, want 3 (the title call is aux)", len(calls))
	}
	if calls[0].Text != "hello codex" {
		t.Errorf("wrapper messages not skipped: Text %q", calls[0].Text)
	}
	all := srv.Requests()
	if a := all[len(all)-1]; a.Aux != "json" || a.Model != "gpt-5.6-luna" {
		t.Errorf("title call recorded Aux %q Model %q", a.Aux, a.Model)
	}
}

// --- Anthropic Messages ---

// messagesClient reads a Messages stream: names match types, content
// blocks start, take deltas of their own kind and stop in index order.
func messagesClient(t *testing.T, events []sseEvent) result {
	t.Helper()
	var r result
	if events[0].Name != "message_start" || events[len(events)-1].Name != "message_stop" {
		t.Fatalf("stream runs %q … %q", events[0].Name, events[len(events)-1].Name)
	}
	var block map[string]any
	var partial strings.Builder
	next := 0.0
	for i, ev := range events {
		d := decode(t, ev.Data)
		if d["type"] != ev.Name {
			t.Fatalf("event %d: name %q, data type %v", i, ev.Name, d["type"])
		}
		switch ev.Name {
		case "message_start":
			m := d["message"].(map[string]any)
			if m["role"] != "assistant" || m["type"] != "message" || len(m["content"].([]any)) != 0 || m["usage"] == nil {
				t.Fatalf("message_start: %s", ev.Data)
			}
		case "content_block_start":
			if block != nil || d["index"] != next {
				t.Fatalf("block start out of order: %s", ev.Data)
			}
			block = d["content_block"].(map[string]any)
			partial.Reset()
		case "content_block_delta":
			if block == nil || d["index"] != next {
				t.Fatalf("delta outside its block: %s", ev.Data)
			}
			delta := d["delta"].(map[string]any)
			switch {
			case block["type"] == "text" && delta["type"] == "text_delta":
				r.Text += delta["text"].(string)
			case block["type"] == "tool_use" && delta["type"] == "input_json_delta":
				partial.WriteString(delta["partial_json"].(string))
			default:
				t.Fatalf("delta %v in a %v block", delta["type"], block["type"])
			}
		case "content_block_stop":
			if block == nil || d["index"] != next {
				t.Fatalf("stop outside its block: %s", ev.Data)
			}
			if block["type"] == "tool_use" {
				if !strings.HasPrefix(block["id"].(string), "toolu_") {
					t.Errorf("tool_use id %v", block["id"])
				}
				r.Calls = append(r.Calls, call{Name: block["name"].(string), Args: args(t, partial.String())})
			}
			block = nil
			next++
		case "message_delta":
			r.Stop = d["delta"].(map[string]any)["stop_reason"].(string)
		case "message_stop":
		default:
			t.Fatalf("unexpected event %q", ev.Name)
		}
	}
	return r
}

func messagesBody(messages ...any) map[string]any {
	return map[string]any{
		"model": "claude-opus-5-5", "max_tokens": 32000, "stream": true,
		"system":   []any{map[string]any{"type": "text", "text": "You are Claude Code"}},
		"messages": messages,
		"tools": []any{map[string]any{"name": "Bash", "description": "run", "input_schema": map[string]any{
			"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}, "timeout": map[string]any{"type": "number"}},
		}}},
	}
}

func userBlocks(texts ...string) map[string]any {
	var blocks []any
	for _, t := range texts {
		blocks = append(blocks, map[string]any{"type": "text", "text": t})
	}
	return map[string]any{"role": "user", "content": blocks}
}

func TestMessages(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t)
	url := srv.URL + "/v1/messages?beta=true"

	t.Run("text", func(t *testing.T) {
		body := messagesBody(userBlocks("<system-reminder>\nsome context\n</system-reminder>", "hello claude"))
		got := messagesClient(t, readSSE(t, post(t, url, body)))
		if diff := cmp.Diff(result{Text: "PONG hello claude", Stop: "end_turn"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("tool call", func(t *testing.T) {
		got := messagesClient(t, readSSE(t, post(t, url, messagesBody(userBlocks("call the tool")))))
		if diff := cmp.Diff(result{Calls: withName(shellWant, "Bash"), Stop: "tool_use"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("after tool result", func(t *testing.T) {
		body := messagesBody(userBlocks("call the tool"),
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": map[string]any{"command": "echo hi > out.txt"}}}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{map[string]any{"type": "text", "text": "ok"}}},
				map[string]any{"type": "text", "text": "<system-reminder>note</system-reminder>"},
			}})
		got := messagesClient(t, readSSE(t, post(t, url, body)))
		if diff := cmp.Diff(result{Text: "DONE tool ran", Stop: "end_turn"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("suggestion side call", func(t *testing.T) {
		body := messagesBody(userBlocks("call the tool"), map[string]any{"role": "assistant", "content": "done"},
			userBlocks("[SUGGESTION MODE: suggest what the user might type next]"))
		got := messagesClient(t, readSSE(t, post(t, url, body)))
		if got.Text != "ok" || len(got.Calls) != 0 {
			t.Errorf("suggestion answered %+v", got)
		}
	})
	t.Run("count tokens and quota", func(t *testing.T) {
		resp := post(t, srv.URL+"/v1/messages/count_tokens?beta=true", messagesBody(userBlocks("hi")))
		var n map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&n)
		resp.Body.Close()
		if n["input_tokens"].(float64) < 1 {
			t.Errorf("count_tokens = %v", n)
		}
		body := map[string]any{"model": "m", "max_tokens": 1, "messages": []any{map[string]any{"role": "user", "content": "quota"}}}
		resp = post(t, url, body)
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if m["type"] != "message" || m["stop_reason"] != "end_turn" {
			t.Errorf("quota check answered %v", m)
		}
	})

	errSrv := modeltest.New(t, modeltest.WithError(529, "Overloaded"))
	t.Run("error", func(t *testing.T) {
		got := readError(t, post(t, errSrv.URL+"/v1/messages", messagesBody(userBlocks("hi"))), 529)
		want := map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	calls := srv.Calls()
	if len(calls) != 3 {
		t.Fatalf("recorded %d script calls, want 3", len(calls))
	}
	if c := calls[2]; c.Text != "call the tool" || !cmp.Equal(c.ToolResults, []string{"ok"}) {
		t.Errorf("after-tool call recorded Text %q ToolResults %q", c.Text, c.ToolResults)
	}
	var aux []string
	for _, r := range srv.Requests() {
		if r.Aux != "" || r.Kind != modeltest.KindModel {
			aux = append(aux, string(r.Kind)+":"+r.Aux)
		}
	}
	if diff := cmp.Diff([]string{"model:suggestion", "count_tokens:", "model:quota"}, aux); diff != "" {
		t.Errorf("side calls (-want +got):\n%s", diff)
	}
}

// --- Gemini ---

// geminiClient reads a streamGenerateContent SSE stream: data-only events,
// each a GenerateContentResponse; only the last has finishReason and
// usageMetadata.
func geminiClient(t *testing.T, events []sseEvent) result {
	t.Helper()
	var r result
	for i, ev := range events {
		if ev.Name != "" {
			t.Fatalf("gemini event %d has an event line", i)
		}
		d := decode(t, ev.Data)
		cand := d["candidates"].([]any)[0].(map[string]any)
		content := cand["content"].(map[string]any)
		if content["role"] != "model" {
			t.Fatalf("role %v", content["role"])
		}
		for _, p := range content["parts"].([]any) {
			part := p.(map[string]any)
			if s, ok := part["text"].(string); ok {
				r.Text += s
			}
			if fc, ok := part["functionCall"].(map[string]any); ok {
				r.Calls = append(r.Calls, call{Name: fc["name"].(string), Args: fc["args"].(map[string]any)})
			}
		}
		last := i == len(events)-1
		if fr, ok := cand["finishReason"].(string); ok != last || (last && d["usageMetadata"] == nil) {
			t.Fatalf("event %d of %d: finishReason %q usageMetadata %v", i, len(events), fr, d["usageMetadata"])
		} else if last {
			r.Stop = fr
		}
	}
	return r
}

func geminiBody(contents ...any) map[string]any {
	return map[string]any{
		"contents":          contents,
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "You are Gemini CLI"}}},
		"tools": []any{map[string]any{"functionDeclarations": []any{
			map[string]any{"name": "read_file", "parametersJsonSchema": map[string]any{"type": "object"}},
			map[string]any{"name": "run_shell_command", "parametersJsonSchema": map[string]any{
				"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}, "dir_path": map[string]any{"type": "string"}},
			}},
		}}},
		"generationConfig": map[string]any{"temperature": 0, "thinkingConfig": map[string]any{"includeThoughts": true}},
	}
}

func geminiUser(texts ...string) map[string]any {
	var parts []any
	for _, t := range texts {
		parts = append(parts, map[string]any{"text": t})
	}
	return map[string]any{"role": "user", "parts": parts}
}

func TestGemini(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t)
	url := srv.URL + "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"

	t.Run("text", func(t *testing.T) {
		body := geminiBody(geminiUser("<session_context>\nThis is the Gemini CLI.\n</session_context>", "hello gemini"))
		got := geminiClient(t, readSSE(t, post(t, url, body)))
		if diff := cmp.Diff(result{Text: "PONG hello gemini", Stop: "STOP"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("tool call", func(t *testing.T) {
		got := geminiClient(t, readSSE(t, post(t, url, geminiBody(geminiUser("ctx", "a tool now")))))
		if diff := cmp.Diff(result{Calls: withName(shellWant, "run_shell_command"), Stop: "STOP"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("after tool result", func(t *testing.T) {
		body := geminiBody(geminiUser("a tool now"),
			map[string]any{"role": "model", "parts": []any{map[string]any{"functionCall": map[string]any{"name": "run_shell_command", "args": map[string]any{"command": "echo hi > out.txt"}}}}},
			map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{"name": "run_shell_command", "response": map[string]any{"output": "Output: (empty)"}}}}})
		got := geminiClient(t, readSSE(t, post(t, url, body)))
		if diff := cmp.Diff(result{Text: "DONE tool ran", Stop: "STOP"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("generateContent, countTokens and a json side call", func(t *testing.T) {
		body := geminiBody(geminiUser("hi"))
		resp := post(t, srv.URL+"/v1beta/models/gemini-2.5-flash:generateContent", body)
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		parts := m["candidates"].([]any)[0].(map[string]any)["content"].(map[string]any)["parts"].([]any)
		if parts[0].(map[string]any)["text"] != "PONG hi" {
			t.Errorf("generateContent answered %v", m)
		}
		resp = post(t, srv.URL+"/v1beta/models/gemini-2.5-flash:countTokens", body)
		m = nil
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if m["totalTokens"].(float64) < 1 {
			t.Errorf("countTokens answered %v", m)
		}
		body = geminiBody(geminiUser("who speaks next?"))
		body["generationConfig"] = map[string]any{"responseMimeType": "application/json", "responseJsonSchema": map[string]any{
			"type": "object", "properties": map[string]any{
				"reasoning": map[string]any{"type": "string"}, "next_speaker": map[string]any{"type": "string", "enum": []any{"model", "user"}},
			},
		}}
		resp = post(t, srv.URL+"/v1beta/models/gemini-2.5-flash:generateContent", body)
		m = nil
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		text := m["candidates"].([]any)[0].(map[string]any)["content"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"].(string)
		if diff := cmp.Diff(map[string]any{"reasoning": "fake", "next_speaker": "user"}, decode(t, text)); diff != "" {
			t.Errorf("json side call (-want +got):\n%s", diff)
		}
	})

	errSrv := modeltest.New(t, modeltest.WithError(http.StatusTooManyRequests, "quota exceeded"))
	t.Run("error", func(t *testing.T) {
		got := readError(t, post(t, errSrv.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", geminiBody(geminiUser("hi"))), 429)
		want := map[string]any{"error": map[string]any{"code": 429.0, "message": "quota exceeded", "status": "RESOURCE_EXHAUSTED"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	calls := srv.Calls()
	if len(calls) != 4 || calls[0].Model != "gemini-2.5-flash" || !calls[0].Stream || calls[3].Stream {
		t.Fatalf("recorded calls %+v", calls)
	}
	if c := calls[2]; c.Text != "a tool now" || !cmp.Equal(c.ToolResults, []string{"Output: (empty)"}) {
		t.Errorf("after-tool call recorded Text %q ToolResults %q", c.Text, c.ToolResults)
	}
}

// --- scripting ---

func TestScript(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, modeltest.WithScript(func(r modeltest.Request) modeltest.Reply {
		switch {
		case r.Text == "fail once":
			return modeltest.Reply{Err: &modeltest.Error{Status: 400, Message: "context too long"}}
		case r.Text == "two calls":
			return modeltest.Reply{Text: "calling", ToolCalls: []modeltest.ToolCall{
				{Name: "read", Args: json.RawMessage(`{"path":"a"}`)}, {Name: "read"},
			}}
		}
		return modeltest.Default(r)
	}))
	url := srv.OpenAIBaseURL() + "/chat/completions"

	got := readError(t, post(t, url, chatBody(userParts("fail once"))), 400)
	if got["error"].(map[string]any)["message"] != "context too long" {
		t.Errorf("error body %v", got)
	}
	r := chatClient(t, readSSE(t, post(t, url, chatBody(userParts("two calls")))))
	want := result{Text: "calling", Stop: "tool_calls", Calls: []call{
		{Name: "read", Args: map[string]any{"path": "a"}}, {Name: "read", Args: map[string]any{}},
	}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	r = messagesClient(t, readSSE(t, post(t, srv.URL+"/v1/messages", messagesBody(userBlocks("two calls")))))
	if len(r.Calls) != 2 || r.Text != "calling" {
		t.Errorf("messages: %+v", r)
	}
	if recs := srv.Requests(); recs[1].Reply.ToolCalls[0].ID == "" {
		t.Error("recorded tool call has no id")
	}
}

// TestTitleCall checks opencode's title call, made on whichever API its
// provider speaks, is answered as a title and kept from the script.
func TestTitleCall(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t)
	const system = "You are a title generator. You output ONLY a thread title."
	body := chatBody(map[string]any{"role": "system", "content": system}, userParts("use the tool"))
	body["tools"] = []any{}
	if got := chatClient(t, readSSE(t, post(t, srv.OpenAIBaseURL()+"/chat/completions", body))); got.Text != "Fake session title" {
		t.Errorf("chat title reply %q", got.Text)
	}
	mb := messagesBody(userBlocks("Generate a title for this conversation:\n", "use the tool"))
	mb["system"] = []any{map[string]any{"type": "text", "text": system}}
	if got := messagesClient(t, readSSE(t, post(t, srv.URL+"/v1/messages", mb))); got.Text != "Fake session title" {
		t.Errorf("messages title reply %q", got.Text)
	}
	gb := geminiBody(geminiUser("use the tool"))
	gb["systemInstruction"] = map[string]any{"parts": []any{map[string]any{"text": system}}}
	if got := geminiClient(t, readSSE(t, post(t, srv.URL+"/v1beta/models/m:streamGenerateContent?alt=sse", gb))); got.Text != "Fake session title" {
		t.Errorf("gemini title reply %q", got.Text)
	}
	rb := responsesBody(userInput("use the tool"))
	rb["instructions"] = system
	if got := responsesClient(t, readSSE(t, post(t, srv.OpenAIBaseURL()+"/responses", rb))); got.Text != "Fake session title" {
		t.Errorf("responses title reply %q", got.Text)
	}
	if n := len(srv.Calls()); n != 0 {
		t.Errorf("%d title calls reached the script", n)
	}
}

func TestDelayEndsWithClient(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, modeltest.WithScript(func(modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Text: "late", Delay: time.Hour}
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	b, _ := json.Marshal(chatBody(userParts("hi")))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.OpenAIBaseURL()+"/chat/completions", bytes.NewReader(b))
	// No bound on how long giving up took: that is the client's deadline,
	// and a timing under load. The server's side ends with Close, which
	// the cleanup runs: a delay that ignored it would hang the test.
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("a delayed reply came before the client gave up")
	}
}

func TestUnknownPath(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t)
	got := readError(t, post(t, srv.URL+"/api/event_logging/batch", map[string]any{}), 404)
	if msg := got["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "/api/event_logging/batch") {
		t.Errorf("message %q", msg)
	}
	if recs := srv.Requests(); len(recs) != 1 || recs[0].API != "" || recs[0].Path != "/api/event_logging/batch" {
		t.Errorf("recorded %+v", recs)
	}
}

func TestShellCall(t *testing.T) {
	t.Parallel()
	codex := modeltest.Tool{Name: "exec_command", Schema: json.RawMessage(`{"properties":{"cmd":{"type":"string"},"sandbox_permissions":{"type":"string"},"justification":{"type":"string"}}}`)}
	tests := []struct {
		name     string
		tools    []modeltest.Tool
		escalate bool
		want     string // name and arguments, "" for none
	}{
		{name: "none", tools: []modeltest.Tool{{Name: "read"}}},
		{name: "string command", tools: []modeltest.Tool{{Name: "Bash", Schema: json.RawMessage(`{"properties":{"command":{"type":"string"}}}`)}},
			want: `Bash {"command":"echo hi > out.txt"}`},
		{name: "argv command", tools: []modeltest.Tool{{Name: "shell", Schema: json.RawMessage(`{"properties":{"command":{"type":"array","items":{"type":"string"}}}}`)}},
			want: `shell {"command":["bash","-lc","echo hi > out.txt"]}`},
		{name: "gemini upper-case types", tools: []modeltest.Tool{{Name: "run_shell_command", Schema: json.RawMessage(`{"type":"OBJECT","properties":{"command":{"type":"STRING"}}}`)}},
			want: `run_shell_command {"command":"echo hi > out.txt"}`},
		{name: "codex escalated", tools: []modeltest.Tool{codex}, escalate: true,
			want: `exec_command {"cmd":"echo hi > out.txt","justification":"Write out.txt as the test asks.","sandbox_permissions":"require_escalated"}`},
		{name: "codex plain", tools: []modeltest.Tool{codex}, want: `exec_command {"cmd":"echo hi > out.txt"}`},
		{name: "no schema", tools: []modeltest.Tool{{Name: "bash"}}, want: `bash {"command":"echo hi > out.txt"}`},
		{name: "preference order", tools: []modeltest.Tool{{Name: "run_shell_command"}, {Name: "bash"}}, want: `bash {"command":"echo hi > out.txt"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := modeltest.ShellCall(modeltest.Request{Tools: tt.tools, Escalate: tt.escalate}, modeltest.ShellCommand)
			got := ""
			if ok {
				got = c.Name + " " + string(c.Args)
			}
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestWithoutEscalation(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, modeltest.WithoutEscalation())
	got := responsesClient(t, readSSE(t, post(t, srv.OpenAIBaseURL()+"/responses", responsesBody(userInput("run a tool please")))))
	want := []call{{Name: "exec_command", Args: map[string]any{"cmd": "echo hi > out.txt"}}}
	if diff := cmp.Diff(want, got.Calls); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
