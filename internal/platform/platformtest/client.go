package platformtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agentrunner/runner/internal/wire"
)

// Client calls the runner the way Agenta's Python client does
// (sdks/python/agenta/sdk/agents/utils/ts_runner.py): POST /run with
// Accept: application/x-ndjson, any HTTP status >= 400 is a transport
// failure ("Agent runner HTTP <n>"), ping records are skipped, the
// stream must end with exactly one result, and ok:false raises with the
// runner's error.
type Client struct {
	URL, Token string
}

// Outcome is one run as the client saw it.
type Outcome struct {
	Result wire.Result
	Events []wire.Event
}

// ErrRunFailed is a run the runner reported failed (ok:false).
var ErrRunFailed = errors.New("agent run failed")

// Run posts body (a request object or its JSON) and reads the stream.
// On ok:false the outcome is returned with an error wrapping
// ErrRunFailed that carries the runner's message.
func (c *Client) Run(ctx context.Context, body any) (Outcome, error) {
	b, ok := body.([]byte)
	if s, isStr := body.(string); isStr {
		b, ok = []byte(s), true
	}
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return Outcome{}, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/run", bytes.NewReader(b))
	if err != nil {
		return Outcome{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Outcome{}, fmt.Errorf("agent runner unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return Outcome{}, fmt.Errorf("Agent runner HTTP %d", resp.StatusCode)
	}
	var out Outcome
	results := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return out, fmt.Errorf("agent runner stream: bad record %q: %w", sc.Text(), err)
		}
		switch rec.Kind {
		case wire.RecordPing:
		case wire.RecordEvent:
			if rec.Event != nil {
				out.Events = append(out.Events, *rec.Event)
			}
		case wire.RecordResult:
			results++
			if rec.Result != nil {
				out.Result = *rec.Result
			}
		default:
			return out, fmt.Errorf("agent runner stream: unknown record kind %q", rec.Kind)
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("agent runner stream: %w", err)
	}
	if results != 1 {
		return out, fmt.Errorf("agent runner stream ended with %d results, want exactly 1", results)
	}
	if !out.Result.OK {
		return out, fmt.Errorf("%w: %s", ErrRunFailed, out.Result.Error)
	}
	return out, nil
}

// Respond answers a pending approval on the platform, as mobile or the
// API's respond flow does: the row flips to responded, and the resume
// conversation is composed server-side from the session's records with
// the decision {approved, interactionToken} on the assistant tail. The
// caller posts the returned messages as the next run.
func (f *Fake) Respond(session, token string, approved bool) ([]wire.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var row *Interaction
	for _, i := range f.interactions {
		if i.SessionID == session && i.Token == token {
			row = i
		}
	}
	if row == nil || row.Status != "pending" {
		return nil, fmt.Errorf("interaction %s is not pending", token)
	}
	row.Status = "responded"
	var data struct {
		Request struct {
			Tool       string          `json:"tool"`
			Args       json.RawMessage `json:"args"`
			ToolCallID string          `json:"tool_call_id"`
		} `json:"request"`
	}
	_ = json.Unmarshal(row.Data, &data)
	var msgs []wire.Message
	assistant := func() *wire.Message {
		if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
			return &msgs[n-1]
		}
		msgs = append(msgs, wire.Message{Role: "assistant", Content: wire.MessageContent{Blocks: []wire.ContentBlock{}}})
		return &msgs[len(msgs)-1]
	}
	hasCall := false
	for _, r := range f.records {
		if r.SessionID != session {
			continue
		}
		var ev wire.Event
		_ = json.Unmarshal(r.Attributes, &ev)
		switch {
		case r.RecordSource == "user" && r.RecordType == "message":
			msgs = append(msgs, wire.Message{Role: "user", Content: wire.MessageContent{Text: ev.Text, IsText: true}})
		case r.RecordType == "message":
			a := assistant()
			a.Content.Blocks = append(a.Content.Blocks, wire.ContentBlock{Type: "text", Text: ev.Text})
		case r.RecordType == "tool_call":
			a := assistant()
			a.Content.Blocks = append(a.Content.Blocks, wire.ContentBlock{Type: "tool_call", ToolCallID: ev.ID, ToolName: ev.Name, Input: ev.Input})
			hasCall = hasCall || ev.ID == data.Request.ToolCallID
		}
	}
	a := assistant()
	if !hasCall {
		a.Content.Blocks = append(a.Content.Blocks, wire.ContentBlock{Type: "tool_call", ToolCallID: data.Request.ToolCallID, ToolName: data.Request.Tool, Input: data.Request.Args})
	}
	out, _ := json.Marshal(map[string]any{"approved": approved, "interactionToken": token})
	a.Content.Blocks = append(a.Content.Blocks, wire.ContentBlock{Type: "tool_result", ToolCallID: data.Request.ToolCallID, ToolName: data.Request.Tool, Output: out})
	return msgs, nil
}
