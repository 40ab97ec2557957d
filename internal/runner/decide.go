package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// Decide records a person's decision on a paused interaction and returns
// the turn that continues it: warm on the same harness when it is still
// parked, cold with the decision replayed otherwise. An unknown
// interaction is ErrNotFound; one already answered is ErrConflict.
func (s *Service) Decide(ctx context.Context, k store.SessionKey, interactionID string, approved bool) (*Turn, error) {
	if _, err := s.store.GetSession(ctx, k); err != nil {
		return nil, fmt.Errorf("session %s: %w", k, err)
	}
	pending, answered, err := s.interactions(ctx, k)
	if err != nil {
		return nil, err
	}
	if answered[interactionID] {
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s was already answered", interactionID))
	}
	var g *gate
	for i := range pending {
		if pending[i].InteractionID == interactionID {
			g = &pending[i]
		}
	}
	if g == nil {
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("no pending interaction %s in session %s", interactionID, k))
	}
	last, err := s.pausedRequest(ctx, k, g, approved)
	if err != nil {
		return nil, err
	}
	req := *last
	req.TurnID = ""
	out, _ := json.Marshal(map[string]bool{"approved": approved})
	req.Messages = append(append([]wire.Message{}, last.Messages...),
		wire.Message{Role: "assistant", Content: wire.MessageContent{Blocks: []wire.ContentBlock{{Type: "tool_call", ToolCallID: g.ToolCallID, ToolName: g.ToolName, Input: g.Input}}}},
		wire.Message{Role: "user", Content: wire.MessageContent{Blocks: []wire.ContentBlock{{Type: "tool_result", ToolCallID: g.ToolCallID, ToolName: g.ToolName, Input: g.Input, Output: out}}}},
	)
	return s.Start(ctx, &req)
}

// interactions reads the session log: approval requests still waiting,
// and the ids already answered.
func (s *Service) interactions(ctx context.Context, k store.SessionKey) ([]gate, map[string]bool, error) {
	evs, err := s.store.ReadEvents(ctx, k, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	return pendingFrom(evs)
}

func pendingFrom(evs []store.Event) ([]gate, map[string]bool, error) {
	answered := map[string]bool{}
	byCall := map[string]bool{}
	for _, e := range evs {
		if e.Event.Type == wire.EventInteractionRes {
			if e.Event.ID != "" {
				answered[e.Event.ID] = true
			}
			var p struct {
				ToolCallID string `json:"toolCallId"`
			}
			_ = json.Unmarshal(e.Event.Payload, &p)
			byCall[p.ToolCallID] = true
		}
	}
	var pending []gate
	for _, e := range evs {
		if e.Event.Type != wire.EventInteractionReq || answered[e.Event.ID] {
			continue
		}
		var p struct {
			ToolCallID string `json:"toolCallId"`
			ToolCall   struct {
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			} `json:"toolCall"`
		}
		_ = json.Unmarshal(e.Event.Payload, &p)
		if byCall[p.ToolCallID] {
			answered[e.Event.ID] = true
			continue
		}
		pending = append(pending, gate{InteractionID: e.Event.ID, ToolCallID: p.ToolCallID, ToolName: p.ToolCall.Name, Input: p.ToolCall.Input})
	}
	return pending, answered, nil
}

// maxResumeBytes caps the resume record a paused turn keeps in the store:
// a request larger than this stays resumable only while this runner
// holds it (warm) or by a new /run carrying the decision.
const maxResumeBytes = 4 << 20

// rememberPause keeps what a paused turn needs to resume, in the store
// (the request without its secrets) and in memory (its secrets), or
// forgets it once the session's next turn answered or superseded it.
func (s *Service) rememberPause(ctx context.Context, log *slog.Logger, k store.SessionKey, p *plan, paused bool) {
	rs, durable := s.store.(store.Resumes)
	s.mu.Lock()
	_, had := s.paused[k]
	delete(s.paused, k)
	s.mu.Unlock()
	if !paused {
		// Only a turn that may follow a pause pays for the delete: one
		// this runner saw pause, or one that answers an approval (the
		// pause may predate a restart).
		if durable && (had || len(p.approvals) > 0 || p.approvalOnly) {
			if err := rs.DeleteResume(ctx, k); err != nil {
				log.Warn("resume record not deleted", logkey.Error, err)
			}
		}
		return
	}
	if !durable {
		s.mu.Lock()
		s.paused[k] = pausedTurn{req: p.req, whole: true, at: s.now()}
		s.mu.Unlock()
		return
	}
	bare, secrets := splitSecrets(p.req)
	s.mu.Lock()
	s.paused[k] = pausedTurn{req: secrets}
	s.mu.Unlock()
	b, err := json.Marshal(bare)
	if err == nil && len(b) > maxResumeBytes {
		err = fmt.Errorf("the request is %d bytes, more than the %d a resume record keeps", len(b), maxResumeBytes)
	}
	if err == nil {
		err = rs.PutResume(ctx, store.Resume{ProjectID: k.ProjectID, SessionID: k.SessionID, Request: b, Secrets: secrets != nil, CreatedAt: s.now()})
	}
	if err != nil {
		// The pause holds while this runner does (it keeps the whole
		// request); after a restart the decision must come as a new /run
		// (Decide says so).
		log.Warn("paused turn not resumable after a restart", logkey.Error, err)
		s.mu.Lock()
		s.paused[k] = pausedTurn{req: p.req, whole: true, at: s.now()}
		s.mu.Unlock()
		if derr := rs.DeleteResume(ctx, k); derr != nil {
			log.Warn("resume record not deleted", logkey.Error, derr)
		}
	}
}

// pausedTurn is what this runner holds in memory of a paused turn.
type pausedTurn struct {
	// req is the request's secrets alone (nil when it had none), or the
	// whole request when whole: no resume record keeps the rest (a store
	// without them, a request too large for one, a failed write).
	req   *wire.Request
	whole bool
	at    time.Time // when a whole request paused
}

// splitSecrets returns req without the fields that carry secrets
// (credentials, headers, the callback bearer), and those fields alone, or
// nil when there are none. Secrets are never written to the store.
func splitSecrets(req *wire.Request) (wire.Request, *wire.Request) {
	bare := *req
	bare.TurnID = ""
	has := len(req.Connection) > 0
	bare.Connection = nil
	if mc := req.ModelConnection; mc != nil {
		c := *mc
		has = has || len(c.Credentials) > 0 || len(c.Environment) > 0
		c.Credentials, c.Environment = nil, nil
		if c.Endpoint != nil {
			ep := *c.Endpoint
			has = has || len(ep.Headers) > 0
			ep.Headers = nil
			c.Endpoint = &ep
		}
		bare.ModelConnection = &c
	}
	if cb := req.ToolCallback; cb != nil {
		c := *cb
		has = has || c.Authorization != ""
		c.Authorization = ""
		bare.ToolCallback = &c
	}
	// The exporter's headers carry the caller's platform credential.
	if _, h := req.TelemetryConfig().OTLP(); len(h) > 0 {
		has = true
		bare.Telemetry = nil
	}
	if len(req.MCPServers) > 0 {
		bare.MCPServers = append([]wire.MCPServer(nil), req.MCPServers...)
		for i := range bare.MCPServers {
			c := &bare.MCPServers[i].Connection
			has = has || len(c.Headers) > 0 || len(c.Credentials) > 0
			c.Headers, c.Credentials = nil, nil
		}
	}
	if !has {
		return bare, nil
	}
	return bare, &wire.Request{Connection: req.Connection, ModelConnection: req.ModelConnection, ToolCallback: req.ToolCallback, MCPServers: req.MCPServers, Telemetry: req.Telemetry}
}

// pausedRequest returns the request of the session's paused turn: from
// the store's resume record with its secrets from memory, or from memory
// alone with a store that keeps no resume records.
func (s *Service) pausedRequest(ctx context.Context, k store.SessionKey, g *gate, approved bool) (*wire.Request, error) {
	again := fmt.Sprintf("send the decision as the next /run whose last message is a tool_result {\"approved\": %v} for toolCallId %q", approved, g.ToolCallID)
	s.mu.Lock()
	pt, held := s.paused[k]
	s.mu.Unlock()
	if held && pt.whole {
		if err := s.expired(g, pt.at); err != nil {
			return nil, err
		}
		return pt.req, nil
	}
	secrets := pt.req
	rs, durable := s.store.(store.Resumes)
	if !durable {
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s: this runner no longer holds the paused turn's configuration (it restarted); %s", g.InteractionID, again))
	}
	rec, err := rs.GetResume(ctx, k)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s: the paused turn's configuration was not kept (too large, or written by an older runner) and this runner restarted since; %s", g.InteractionID, again))
	}
	if err != nil {
		return nil, fmt.Errorf("interaction %s: %w", g.InteractionID, err)
	}
	if err := s.expired(g, rec.CreatedAt); err != nil {
		return nil, err
	}
	if rec.Secrets && (!held || secrets == nil) {
		return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("interaction %s: the paused turn's credentials are not kept on disk and this runner restarted since; %s, carrying the turn's credentials again", g.InteractionID, again))
	}
	var req wire.Request
	if err := json.Unmarshal(rec.Request, &req); err != nil {
		return nil, fmt.Errorf("interaction %s: resume record: %w", g.InteractionID, err)
	}
	if rec.Secrets {
		mergeSecrets(&req, secrets)
	}
	return &req, nil
}

// mergeSecrets is splitSecrets undone: the secret fields back into bare.
func mergeSecrets(bare, secrets *wire.Request) {
	if secrets == nil {
		return
	}
	bare.Connection, bare.ModelConnection, bare.ToolCallback, bare.MCPServers = secrets.Connection, secrets.ModelConnection, secrets.ToolCallback, secrets.MCPServers
	if len(secrets.Telemetry) > 0 {
		bare.Telemetry = secrets.Telemetry
	}
}

// expired is the refusal of an answer to an approval that paused at
// since and has waited longer than the approval TTL, or nil.
func (s *Service) expired(g *gate, since time.Time) error {
	if ttl, waited := s.cfg.ApprovalTTL, s.now().Sub(since); waited > ttl {
		return errdefs.With(errdefs.ErrUnprocessable, fmt.Errorf("interaction %s expired: it waited %s, longer than AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS (%s); send a new message to start the turn again", g.InteractionID, waited.Round(time.Second), ttl))
	}
	return nil
}

// now is the time on Config.PoolClock, the real clock without one: an
// approval's TTL runs on the clock of its warm park, so a test moves both.
func (s *Service) now() time.Time {
	if s.cfg.PoolClock != nil {
		return s.cfg.PoolClock.Now()
	}
	return time.Now()
}
