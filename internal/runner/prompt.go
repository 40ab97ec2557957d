package runner

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// promptBlocks turns the tail user message into ACP content blocks and its
// plain text.
func promptBlocks(m wire.Message) ([]json.RawMessage, string, error) {
	if m.Content.IsText || m.Content.Blocks == nil {
		if strings.TrimSpace(m.Content.Text) == "" {
			return nil, "", nil
		}
		return []json.RawMessage{textBlock(m.Content.Text)}, m.Content.Text, nil
	}
	var (
		out  []json.RawMessage
		text strings.Builder
	)
	for i, b := range m.Content.Blocks {
		switch b.Type {
		case "text":
			if b.Text == "" {
				continue
			}
			out = append(out, textBlock(b.Text))
			text.WriteString(b.Text)
		case "image":
			data, mime := b.Data, b.MimeType
			if rest, ok := strings.CutPrefix(b.URI, "data:"); ok && data == "" {
				meta, payload, _ := strings.Cut(rest, ",")
				mime, _, _ = strings.Cut(meta, ";")
				data = payload
			}
			if data == "" || mime == "" {
				return nil, "", errdefs.Invalidf("messages[-1].content[%d]: image needs data and mimeType (or a data: uri)", i)
			}
			raw, _ := json.Marshal(map[string]string{"type": "image", "data": data, "mimeType": mime})
			out = append(out, raw)
		case "resource", "resource_link":
			raw, _ := json.Marshal(b)
			out = append(out, raw)
		case "tool_call", "tool_result", "attachment":
			// Tool envelopes are not a fresh turn; attachments are fetched
			// from the platform when the turn runs (attach.go).
		default:
			return nil, "", errdefs.Invalidf("messages[-1].content[%d].type: unknown block type %q", i, b.Type)
		}
	}
	return out, text.String(), nil
}

func textBlock(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	return b
}

// replay renders earlier messages as a transcript the harness reads before
// the new text, for a cold turn with no native session to load (docs/contract.md,
// Sessions). Only the last max characters are kept.
func replay(history []wire.Message, text string, max int) string {
	if len(history) == 0 {
		return text
	}
	var b strings.Builder
	for _, m := range history {
		line := messageText(m)
		if line == "" {
			continue
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(line)
		b.WriteString("\n")
	}
	transcript := b.String()
	if max > 0 && len(transcript) > max {
		cut := len(transcript) - max
		transcript = "[" + strconv.Itoa(cut) + " earlier characters omitted]\n" + transcript[cut:]
	}
	if transcript == "" {
		return text
	}
	return "Conversation so far:\n" + transcript + "\nContinue the conversation. The user now says:\n" + text
}

// lastRequest is the text of the user's last message that is not a
// bracketed note (a tool's result, an omission): the request a paused
// turn re-issues.
func lastRequest(history []wire.Message) string {
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role == "user" {
			if txt := messageText(history[i]); txt != "" && !strings.HasPrefix(txt, "[") {
				return txt
			}
		}
	}
	return ""
}

func messageText(m wire.Message) string {
	if m.Content.IsText || m.Content.Blocks == nil {
		return m.Content.Text
	}
	var parts []string
	for _, b := range m.Content.Blocks {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "tool_call":
			parts = append(parts, fmt.Sprintf("[called %s(%s)]", b.ToolName, string(b.Input)))
		case "tool_result":
			out := string(b.Output)
			if len(out) > 4000 {
				out = out[:4000] + fmt.Sprintf("… [%d characters omitted]", len(out)-4000)
			}
			verb := "returned"
			if b.IsError {
				verb = "error"
			}
			parts = append(parts, fmt.Sprintf("[%s %s: %s]", b.ToolName, verb, out))
		case "image":
			parts = append(parts, "[image]")
		}
	}
	return strings.Join(parts, " ")
}
