package runner

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// loadable returns the harness session id to session/load: only when this
// harness wrote the session's latest turn and that turn completed (a
// paused, failed or cancelled turn may have left a partial transcript).
func (s *Service) loadable(ctx context.Context, k store.SessionKey, harness string) string {
	turns, err := s.store.ListTurns(ctx, k)
	if err != nil {
		return ""
	}
	for i := len(turns) - 1; i >= 0; i-- {
		tr := turns[i]
		if tr.Status == store.TurnRunning {
			continue // this turn
		}
		if tr.Status == store.TurnCompleted && tr.Harness == harness && tr.AgentSessionID != "" {
			return tr.AgentSessionID
		}
		return ""
	}
	return ""
}

// conversation rebuilds the session's messages from its log: the user
// prompts and assistant answers of earlier turns.
func (s *Service) conversation(ctx context.Context, k store.SessionKey, upTo int64) ([]wire.Message, error) {
	evs, err := s.store.ReadEvents(ctx, k, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("read the session log to rebuild its history: %w", err)
	}
	var out []wire.Message
	for _, e := range evs {
		if e.Seq > upTo || e.Event.Type != wire.EventMessage || e.Event.IsError {
			continue
		}
		out = append(out, wire.Message{Role: e.Event.Role, Content: wire.MessageContent{Text: e.Event.Text, IsText: true}})
	}
	return out, nil
}

func nonText(blocks []json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, b := range blocks {
		var h struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &h) == nil && h.Type != "text" {
			out = append(out, b)
		}
	}
	return out
}
