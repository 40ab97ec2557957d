package modeltest

import (
	"encoding/json"
	"maps"
	"net/http"
	"time"
)

// --- OpenAI Chat Completions ---

// chat writes chat.completion chunks: a first delta with the role, content
// deltas, tool-call deltas (the call with empty arguments, then argument
// fragments), a delta with finish_reason, a usage chunk with no choices
// when stream_options.include_usage asks for it, then "data: [DONE]".
func (a answer) chat(w http.ResponseWriter) {
	id, created, model := a.s.id("chatcmpl"), time.Now().Unix(), a.req.Model
	finish := "stop"
	if len(a.reply.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	usage := map[string]any{
		"prompt_tokens":     a.inTokens,
		"completion_tokens": a.outTokens(),
		"total_tokens":      a.inTokens + a.outTokens(),
	}
	if !a.req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		if a.reply.Text != "" {
			msg["content"] = a.reply.Text
		}
		if len(a.reply.ToolCalls) > 0 {
			var calls []any
			for _, c := range a.reply.ToolCalls {
				calls = append(calls, map[string]any{
					"id": c.ID, "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": string(c.Args)},
				})
			}
			msg["tool_calls"] = calls
		}
		writeJSON(w, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}
	st := newStream(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
	}
	st.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, piece := range chunks(a.reply.Text) {
		st.event("", chunk(map[string]any{"content": piece}, nil))
	}
	for i, c := range a.reply.ToolCalls {
		st.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""},
		}}}, nil))
		for _, frag := range halves(string(c.Args)) {
			st.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": frag},
			}}}, nil))
		}
	}
	st.event("", chunk(map[string]any{}, finish))
	if obj(a.body["stream_options"])["include_usage"] == true {
		st.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": usage,
		})
	}
	st.data("", "[DONE]")
}

// --- OpenAI Responses ---

// responses writes typed events, each as "event: <type>" plus a data line
// carrying the same type and a sequence_number: response.created,
// response.in_progress, then per output item output_item.added, its
// content or argument deltas and dones, output_item.done, and finally
// response.completed with the whole output and usage.
func (a answer) responses(w http.ResponseWriter) {
	resp := map[string]any{
		"id": a.s.id("resp"), "object": "response", "created_at": time.Now().Unix(),
		"model": a.req.Model, "status": "in_progress", "output": []any{},
		"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
		"error": nil, "incomplete_details": nil, "usage": nil,
	}
	var output []any
	var items [][2]any // the item when added, and when done
	if a.reply.Text != "" {
		id := a.s.id("msg")
		text := []any{map[string]any{"type": "output_text", "text": a.reply.Text, "annotations": []any{}}}
		added := map[string]any{"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}
		done := map[string]any{"id": id, "type": "message", "status": "completed", "role": "assistant", "content": text}
		items = append(items, [2]any{added, done})
	}
	for _, c := range a.reply.ToolCalls {
		id := a.s.id("fc")
		added := map[string]any{"id": id, "type": "function_call", "status": "in_progress", "call_id": c.ID, "name": c.Name, "arguments": ""}
		done := map[string]any{"id": id, "type": "function_call", "status": "completed", "call_id": c.ID, "name": c.Name, "arguments": string(c.Args)}
		items = append(items, [2]any{added, done})
	}
	for _, it := range items {
		output = append(output, it[1])
	}
	usage := map[string]any{
		"input_tokens": a.inTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": a.outTokens(), "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": a.inTokens + a.outTokens(),
	}
	completed := maps.Clone(resp)
	completed["status"], completed["output"], completed["usage"] = "completed", output, usage
	if !a.req.Stream {
		writeJSON(w, completed)
		return
	}
	st := newStream(w)
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		st.event(typ, fields)
	}
	ev("response.created", map[string]any{"response": resp})
	ev("response.in_progress", map[string]any{"response": resp})
	for i, it := range items {
		added, done := it[0].(map[string]any), it[1].(map[string]any)
		id := added["id"]
		ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
		switch added["type"] {
		case "message":
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			ev("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": part})
			for _, piece := range chunks(a.reply.Text) {
				ev("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": piece, "logprobs": []any{}})
			}
			ev("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": a.reply.Text, "logprobs": []any{}})
			part = map[string]any{"type": "output_text", "text": a.reply.Text, "annotations": []any{}}
			ev("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": part})
		case "function_call":
			args := done["arguments"].(string)
			for _, frag := range halves(args) {
				ev("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": frag})
			}
			ev("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "arguments": args})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": done})
	}
	ev("response.completed", map[string]any{"response": completed})
}

// --- Anthropic Messages ---

// messages writes "event: <type>" plus data events: message_start, per
// content block content_block_start, its text_delta or input_json_delta
// deltas and content_block_stop, then message_delta with the stop reason
// and message_stop.
func (a answer) messages(w http.ResponseWriter) {
	id, model := a.s.id("msg"), a.req.Model
	stop := "end_turn"
	if len(a.reply.ToolCalls) > 0 {
		stop = "tool_use"
	}
	usage := map[string]any{
		"input_tokens": a.inTokens, "output_tokens": a.outTokens(),
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
	}
	var content []any
	if a.reply.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": a.reply.Text})
	}
	for _, c := range a.reply.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": c.Args})
	}
	message := func(content []any, stop any, usage map[string]any) map[string]any {
		return map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage,
		}
	}
	if !a.req.Stream {
		if content == nil {
			content = []any{}
		}
		writeJSON(w, message(content, stop, usage))
		return
	}
	st := newStream(w)
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		st.event(typ, fields)
	}
	startUsage := maps.Clone(usage)
	startUsage["output_tokens"] = 1
	ev("message_start", map[string]any{"message": message([]any{}, nil, startUsage)})
	index := 0
	if a.reply.Text != "" {
		ev("content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, piece := range chunks(a.reply.Text) {
			ev("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "text_delta", "text": piece}})
		}
		ev("content_block_stop", map[string]any{"index": index})
		index++
	}
	for _, c := range a.reply.ToolCalls {
		ev("content_block_start", map[string]any{"index": index, "content_block": map[string]any{
			"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{},
		}})
		for _, frag := range halves(string(c.Args)) {
			ev("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": frag}})
		}
		ev("content_block_stop", map[string]any{"index": index})
		index++
	}
	ev("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": a.outTokens()},
	})
	ev("message_stop", map[string]any{})
}

// --- Gemini ---

// gemini writes "data: <GenerateContentResponse>" events, one per text
// piece and one for the function calls; the last carries finishReason
// STOP and usageMetadata. generateContent answers the same object whole.
func (a answer) gemini(w http.ResponseWriter) {
	var pieces [][]any
	for _, p := range chunks(a.reply.Text) {
		pieces = append(pieces, []any{map[string]any{"text": p}})
	}
	var calls []any
	for _, c := range a.reply.ToolCalls {
		var args any
		_ = json.Unmarshal(c.Args, &args)
		calls = append(calls, map[string]any{"functionCall": map[string]any{"name": c.Name, "args": args}})
	}
	if calls != nil {
		pieces = append(pieces, calls)
	}
	if pieces == nil {
		pieces = [][]any{{map[string]any{"text": ""}}}
	}
	responseID := a.s.id("resp")
	chunk := func(parts []any, last bool) map[string]any {
		cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		out := map[string]any{"candidates": []any{cand}, "modelVersion": a.req.Model, "responseId": responseID}
		if last {
			cand["finishReason"] = "STOP"
			out["usageMetadata"] = map[string]any{
				"promptTokenCount": a.inTokens, "candidatesTokenCount": a.outTokens(),
				"totalTokenCount": a.inTokens + a.outTokens(),
			}
		}
		return out
	}
	if !a.req.Stream {
		var all []any
		for _, p := range pieces {
			all = append(all, p...)
		}
		writeJSON(w, chunk(all, true))
		return
	}
	st := newStream(w)
	for i, p := range pieces {
		st.event("", chunk(p, i == len(pieces)-1))
	}
}

// --- errors ---

// writeError answers e in the API's error shape.
func writeError(w http.ResponseWriter, api API, e Error) {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	var body any
	switch api {
	case Messages:
		body = map[string]any{"type": "error", "error": map[string]any{"type": anthropicType(status), "message": e.Message}}
	case Gemini:
		body = map[string]any{"error": map[string]any{"code": status, "message": e.Message, "status": googleStatus(status)}}
	default:
		body = map[string]any{"error": map[string]any{"message": e.Message, "type": openAIType(status), "param": nil, "code": nil}}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func anthropicType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func openAIType(status int) string {
	switch status {
	case 400, 404, 413:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 429:
		return "rate_limit_error"
	}
	return "server_error"
}

func googleStatus(status int) string {
	switch status {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	return "INTERNAL"
}
