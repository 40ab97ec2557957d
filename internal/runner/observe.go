package runner

import (
	"context"
	"encoding/json"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/wire"
)

// observe starts the turn's observers; it runs once the turn has a
// ledger index.
func (t *turn) observe(ctx context.Context) {
	if len(t.svc.cfg.Observers) == 0 {
		return
	}
	p := t.plan
	b := platform.TurnBegin{
		Request: p.req, SessionID: p.req.SessionID, TurnID: p.req.TurnID, TurnIndex: t.index,
		Harness: p.harness.spec.Name, Provider: p.provider,
		Fresh: p.req.Messages[len(p.req.Messages)-1].Role == "user" && len(p.approvals) == 0, UserText: p.tailText,
		Attachments: p.attachments, OwnerClaimed: t.ownerClaimed,
		Stop: func(cause error) { t.cancel(cause) },
		LearnProject: func(id string) {
			t.svc.mu.Lock()
			t.project = id
			t.svc.mu.Unlock()
		},
	}
	b.Spare = t.spared(ctx)
	for _, o := range t.svc.cfg.Observers {
		if to := o.Begin(ctx, b); to != nil {
			t.observers = append(t.observers, to)
		}
	}
}

// spared is TurnBegin.Spare: read from the session log, only for a turn
// that answers approvals.
func (t *turn) spared(ctx context.Context) []string {
	if t.key.SessionID == "" || len(t.plan.approvals) == 0 {
		return nil
	}
	pending, _, err := t.svc.interactions(ctx, t.key)
	if err != nil {
		return nil
	}
	answers := false
	var ids []string
	for _, g := range pending {
		ids = append(ids, g.InteractionID)
		_, byID := t.plan.approvals[g.ToolCallID]
		_, byToken := t.plan.tokens[g.InteractionID]
		answers = answers || byID || byToken
	}
	if !answers {
		return nil
	}
	return ids
}

// observeEvent hands ev to the turn's observers; called under t.mu so
// they see the events in their log order.
func (t *turn) observeEvent(ev wire.Event) {
	for _, o := range t.observers {
		o.Event(ev)
	}
}

func (t *turn) observeEnd(e platform.TurnEnd) {
	for _, o := range t.observers {
		o.End(e)
	}
}

// traceID is the trace the turn's observers record it under, if any.
func (t *turn) traceID() string {
	for _, o := range t.observers {
		if ti, ok := o.(platform.TraceIdentifier); ok {
			if id := ti.TraceID(); id != "" {
				return id
			}
		}
	}
	return ""
}

// attachmentFetcher is the observer that can fetch attachments, if any.
func (t *turn) attachmentFetcher() platform.AttachmentFetcher {
	for _, o := range t.observers {
		if f, ok := o.(platform.AttachmentFetcher); ok {
			return f
		}
	}
	return nil
}

// carriesApproval reports whether m answers a paused approval: a
// tool_result whose output is {"approved": bool}.
func carriesApproval(m wire.Message) bool {
	return len(approvalsOf(m)) > 0
}

// interactionTokens maps the approval answers' interactionToken to
// their tool call id, for answers given on the platform.
func interactionTokens(m wire.Message) map[string]string {
	out := map[string]string{}
	for _, b := range m.Content.Blocks {
		if b.Type != "tool_result" {
			continue
		}
		raw := b.Output
		var s string
		if json.Unmarshal(raw, &s) == nil {
			raw = json.RawMessage(s)
		}
		var v struct {
			Approved *bool  `json:"approved"`
			Token    string `json:"interactionToken"`
		}
		if json.Unmarshal(raw, &v) == nil && v.Approved != nil && v.Token != "" {
			out[v.Token] = b.ToolCallID
		}
	}
	return out
}

// Platform reports whether the turn runs for the Agenta platform: it
// carries the caller's platform credential.
func (r *Turn) Platform() bool {
	return r.t.plan.req.TelemetryConfig().Credential() != ""
}

// closer is an observer with work to finish after the last turn (queued
// platform calls).
type closer interface {
	Close(ctx context.Context) error
}

// closeObservers lets observers finish, bounded by ctx and the
// teardown timeout: an unreachable platform must not hold the shutdown.
func (s *Service) closeObservers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TeardownTimeout)
	defer cancel()
	for _, o := range s.cfg.Observers {
		if c, ok := o.(closer); ok {
			if err := c.Close(ctx); err != nil {
				s.log.Warn("observer did not finish before the shutdown deadline", logkey.Error, err)
			}
		}
	}
}
