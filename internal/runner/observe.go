package runner

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/wire"
)

// Observer is told of every session turn as it runs: the platform
// mirror and the trace exporter are observers. Begin and the returned
// TurnObserver's methods run on the turn's path: they must only hand the
// work off (queue it) and return.
type Observer interface {
	// Begin is called once the turn is in the ledger (a turn without a
	// session: as it starts, with SessionID "" and TurnIndex -1); nil
	// means the observer has nothing to do for this turn.
	Begin(ctx context.Context, b TurnBegin) TurnObserver
}

// TurnBegin describes a starting turn to its observers.
type TurnBegin struct {
	Request   *wire.Request
	SessionID string
	TurnID    string
	TurnIndex int
	Harness   string
	Provider  string
	// Fresh is set when the tail is a new user message (not an approval
	// envelope): its text and attachments are the user's record.
	Fresh       bool
	UserText    string
	Attachments []wire.ContentBlock
	// Stop cancels the running turn (a Stop pressed on the platform).
	Stop func(cause error)
	// Spare are the interaction ids of the session's parked approvals
	// when this turn answers at least one of them: the platform must not
	// cancel them as stale (the resume settles them).
	Spare []string
	// LearnProject records the project the platform says the session
	// belongs to, so /kill finds a turn whose request named none.
	LearnProject func(projectID string)
	// OwnerClaimed is set when the turn already claimed the session on
	// the platform before it started (OwnerClaimer).
	OwnerClaimed bool
}

// TurnObserver follows one turn.
type TurnObserver interface {
	// Event is each event of the turn, in order, as the caller sees it.
	Event(ev wire.Event)
	// End is the turn's outcome, before its result is returned.
	End(e TurnEnd)
}

// TurnEnd is how a turn ended.
type TurnEnd struct {
	StopReason     string
	Usage          *wire.Usage
	Err            error
	AgentSessionID string
	SandboxID      string
	Model          string
}

// TraceIdentifier is a TurnObserver that traces the turn: its trace id
// goes into the result.
type TraceIdentifier interface {
	TraceID() string
}

// Attachment is the content of an attachment block, fetched from where
// the platform keeps it.
type Attachment struct {
	Filename  string
	MediaType string
	Data      []byte
}

// AttachmentFetcher is a TurnObserver that can fetch the turn's
// attachments from the platform.
type AttachmentFetcher interface {
	FetchAttachment(ctx context.Context, id string) (Attachment, error)
}

// errStopped cancels a turn stopped from the platform: an ordinary
// cancellation (stopReason cancelled), not a failure.
var errStopped = errors.New("turn stopped from the platform")

// ErrStopped is the cause observers pass to TurnBegin.Stop.
var ErrStopped = errStopped

// observe starts the turn's observers; it runs once the turn has a
// ledger index.
func (t *turn) observe(ctx context.Context) {
	if len(t.svc.cfg.Observers) == 0 {
		return
	}
	p := t.plan
	b := TurnBegin{
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

func (t *turn) observeEnd(e TurnEnd) {
	for _, o := range t.observers {
		o.End(e)
	}
}

// traceID is the trace the turn's observers record it under, if any.
func (t *turn) traceID() string {
	for _, o := range t.observers {
		if ti, ok := o.(TraceIdentifier); ok {
			if id := ti.TraceID(); id != "" {
				return id
			}
		}
	}
	return ""
}

// attachmentFetcher is the observer that can fetch attachments, if any.
func (t *turn) attachmentFetcher() AttachmentFetcher {
	for _, o := range t.observers {
		if f, ok := o.(AttachmentFetcher); ok {
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
