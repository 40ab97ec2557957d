package agenta

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/wire"
)

// Mirror mirrors every session turn that carries a platform credential
// onto the platform: the session row and Stop (heartbeats), the records
// the web app shows, the approvals plane and the turns ledger. It is a
// platform.Observer; nothing it does blocks or fails a turn.
type Mirror struct {
	cfg Config
	q   *queue
	// unanswered counts owner claims ClaimOwner gave up on.
	unanswered atomic.Int64
}

var (
	_ platform.Observer     = (*Mirror)(nil)
	_ platform.OwnerClaimer = (*Mirror)(nil)
)

// NewMirror returns a mirror; Close it after the runner's last turn.
func NewMirror(cfg Config) *Mirror {
	cfg.defaults()
	m := &Mirror{cfg: cfg}
	m.q = newQueue(&m.cfg)
	return m
}

// Stats counts the mirror's calls.
func (m *Mirror) Stats() platform.Stats {
	st := m.q.stats()
	st.Unanswered = m.unanswered.Load()
	return st
}

// ClaimOwner implements platform.OwnerClaimer: one owner claim (a beat
// without turn_id), on the turn's path, bounded by ctx. A failed or late
// answer is "" (warned, counted): the platform's outage never fails a
// turn.
func (m *Mirror) ClaimOwner(ctx context.Context, req *wire.Request) string {
	conn, ok := m.Connect(req)
	if !ok || req.SessionID == "" {
		return ""
	}
	r, err := conn.Heartbeat(ctx, platform.Heartbeat{SessionID: req.SessionID, ReplicaID: m.cfg.ReplicaID, IsRunning: true})
	m.cfg.Metrics.PlatformCall("heartbeat owner claim (awaited)", err)
	if err != nil {
		m.unanswered.Add(1)
		m.cfg.Logger.Warn("the platform did not answer the session owner claim; starting the session here anyway", "session", req.SessionID, "err", err)
		return ""
	}
	return r.ReplicaID
}

// Close waits, bounded by ctx, for the queued calls to reach the platform.
func (m *Mirror) Close(ctx context.Context) error { return m.q.close(ctx) }

// Connect is the platform as the request reaches it, or false when the
// request carries no platform credential.
func (m *Mirror) Connect(req *wire.Request) (*Conn, bool) {
	cred := req.TelemetryConfig().Credential()
	if cred == "" {
		return nil, false
	}
	return &Conn{base: BaseFor(m.cfg.Base, req), cfg: &m.cfg, credential: cred, obtained: time.Now()}, true
}

// Begin implements platform.Observer.
func (m *Mirror) Begin(ctx context.Context, b platform.TurnBegin) platform.TurnObserver {
	conn, ok := m.Connect(b.Request)
	if !ok || b.SessionID == "" {
		return nil
	}
	t := &turnMirror{m: m, conn: conn, b: b, stop: make(chan struct{}), loopDone: make(chan struct{}), msgs: map[string]*strings.Builder{}}
	if b.Request.RunContext != nil {
		t.spanID = traceSpanID(b.Request.RunContext.Trace)
	}
	t.refs = workflowRefs(b.Request.RunContext)
	t.start()
	return t
}

var (
	_ platform.TurnObserver      = (*turnMirror)(nil)
	_ platform.AttachmentFetcher = (*turnMirror)(nil)
)

// turnMirror mirrors one turn. Its methods only queue work; the queued
// jobs run one at a time on the session's lane, so the record state
// below needs no lock.
type turnMirror struct {
	m      *Mirror
	conn   *Conn
	b      platform.TurnBegin
	spanID string
	refs   []platform.Reference
	stop   chan struct{}
	// loopDone closes when the heartbeat loop has sent its last beat.
	loopDone chan struct{}
	ended    bool // End was called (turn path only)

	// streamID is set by the first heartbeat (lane only, then read by
	// the heartbeat loop under mu).
	mu            sync.Mutex
	streamID      string
	stopped       bool
	warnedForeign bool

	// record state (lane only)
	index    int
	msgs     map[string]*strings.Builder
	openTool *openTool
}

type openTool struct {
	id    string
	index int
	ev    wire.Event
	at    time.Time
}

func (t *turnMirror) push(what string, call func(context.Context) error) {
	t.m.q.push(t.b.SessionID, func(ctx context.Context) { _ = t.m.q.deliver(ctx, what, call) })
}

func (t *turnMirror) start() {
	b := t.b
	// The owner claim (a beat without turn_id) takes or reads the
	// session's affinity key. A cold turn that needed the answer awaited
	// it (ClaimOwner); otherwise another owner is logged, not refused:
	// this replica holds the session warm, or a shared store's lease
	// decides who runs it.
	if !b.OwnerClaimed {
		claim := platform.Heartbeat{SessionID: b.SessionID, ReplicaID: t.m.cfg.ReplicaID, IsRunning: true}
		t.push("heartbeat owner claim", func(ctx context.Context) error {
			r, err := t.conn.Heartbeat(ctx, claim)
			if err == nil && r.ReplicaID != "" && r.ReplicaID != claim.ReplicaID {
				t.m.cfg.Logger.Warn("the platform says another replica owns this session", "session", b.SessionID, "owner", r.ReplicaID)
			}
			return err
		})
	}
	// The first running beat creates the session row (the session list)
	// and names the stream the ledger row points at.
	t.push("heartbeat", func(ctx context.Context) error { return t.beat(ctx, true) })
	// A new turn supersedes the session's unanswered gates, but this
	// turn's and the ones it answers in-band (the resume resolves them).
	cs := platform.CancelStale{SessionID: b.SessionID, TurnID: b.TurnID, Tokens: spareTokens(answeredTokens(b.Request), b.Spare)}
	t.push("interactions/cancel-stale", func(ctx context.Context) error { return t.conn.CancelStaleInteractions(ctx, cs) })
	t.push("turns", func(ctx context.Context) error {
		t.mu.Lock()
		stream := t.streamID
		t.mu.Unlock()
		return t.conn.StartTurn(ctx, platform.TurnStart{
			SessionID: b.SessionID, StreamID: stream, TurnID: b.TurnID, TurnIndex: b.TurnIndex,
			HarnessKind: b.Harness, References: t.refs, SpanID: t.spanID, StartTime: time.Now().UTC(),
		})
	})
	if b.Fresh {
		attrs := map[string]any{"type": "message", "text": b.UserText, "attachments": attachmentRefs(b.Attachments)}
		at := time.Now().UTC()
		t.m.q.push(b.SessionID, func(ctx context.Context) { t.post(ctx, "user", attrs, "", at) })
		if ids := attachmentIDs(b.Attachments); len(ids) > 0 {
			t.push("attachments/reference", func(ctx context.Context) error { return t.conn.ReferenceAttachments(ctx, b.SessionID, ids) })
		}
	}
	t.m.q.wg.Add(1)
	go t.beatLoop()
}

// beat sends one running heartbeat and acts on its reply.
func (t *turnMirror) beat(ctx context.Context, running bool) error {
	h := platform.Heartbeat{SessionID: t.b.SessionID, ReplicaID: t.m.cfg.ReplicaID, TurnID: t.b.TurnID, IsRunning: running,
		Name: sessionName(t.b.UserText), References: t.refs}
	r, err := t.conn.Heartbeat(ctx, h)
	if err != nil {
		return err
	}
	// A beat from a replica that does not own the session's key changes
	// nothing on the platform and answers not-current: that is not a
	// Stop. It happens when replicas share a store and its lease, not the
	// platform's key, decided who runs the session.
	foreign := r.ReplicaID != "" && r.ReplicaID != h.ReplicaID
	t.mu.Lock()
	if r.StreamID != "" {
		t.streamID = r.StreamID
	}
	interrupt := running && !r.CurrentTurn && !t.stopped && !foreign
	if interrupt {
		t.stopped = true
	}
	warnForeign := foreign && !t.warnedForeign
	t.warnedForeign = t.warnedForeign || foreign
	t.mu.Unlock()
	if warnForeign {
		t.m.cfg.Logger.Warn("the platform says another replica owns this session: it ignores this replica's heartbeats (no running badge, Stop does not reach the turn) until that claim expires",
			"session", t.b.SessionID, "owner", r.ReplicaID)
	}
	if r.ProjectID != "" && t.b.LearnProject != nil {
		t.b.LearnProject(r.ProjectID)
	}
	if interrupt {
		t.m.cfg.Logger.Info("turn stopped from the platform (heartbeat: not the current turn)", "session", t.b.SessionID, "turn", t.b.TurnID)
		t.b.Stop(platform.ErrStopped)
	}
	return nil
}

// beatLoop beats every HeartbeatInterval while the turn runs; a failed
// beat fails open (the turn goes on).
func (t *turnMirror) beatLoop() {
	defer t.m.q.wg.Done()
	defer close(t.loopDone)
	tick := time.NewTicker(t.m.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.m.q.ctx.Done():
			return
		case <-tick.C:
			err := t.beat(t.m.q.ctx, true)
			t.m.cfg.Metrics.PlatformCall("heartbeat", err)
			if err != nil {
				t.m.cfg.Logger.Debug("heartbeat failed", "session", t.b.SessionID, "err", err)
			}
		}
	}
}

// Event implements platform.TurnObserver.
func (t *turnMirror) Event(ev wire.Event) {
	if ev.Transient || runnerOnlyData(ev) {
		return
	}
	at := time.Now().UTC()
	t.m.q.push(t.b.SessionID, func(ctx context.Context) { t.record(ctx, ev, at) })
	switch ev.Type {
	case wire.EventInteractionReq:
		t.interaction(ev)
	case wire.EventInteractionRes:
		t.resolve(ev)
	}
}

// End implements platform.TurnObserver.
func (t *turnMirror) End(e platform.TurnEnd) {
	if t.ended {
		return
	}
	t.ended = true
	close(t.stop)
	b := t.b
	t.m.q.push(b.SessionID, func(ctx context.Context) { t.flushTool(ctx) })
	if e.Err == nil && e.StopReason != "paused" && e.StopReason != "cancelled" {
		c := platform.TurnComplete{SessionID: b.SessionID, TurnIndex: b.TurnIndex, AgentSessionID: e.AgentSessionID, EndTime: time.Now().UTC()}
		t.push("turns/complete", func(ctx context.Context) error { return t.conn.CompleteTurn(ctx, c) })
	}
	t.m.q.push(b.SessionID, func(ctx context.Context) {
		// A running beat sent after the release would mark the session
		// running again.
		select {
		case <-t.loopDone:
		case <-ctx.Done():
		}
		_ = t.m.q.deliver(ctx, "heartbeat release", func(ctx context.Context) error { return t.beat(ctx, false) })
	})
}

// FetchAttachment implements platform.AttachmentFetcher.
func (t *turnMirror) FetchAttachment(ctx context.Context, id string) (platform.Attachment, error) {
	return t.conn.FetchAttachment(ctx, t.b.SessionID, id)
}

// record turns a live event into records as the reference runner
// persists them: delta families once, at their end, as one message or
// thought; a tool call's snapshots as one record holding the latest
// arguments, at the index of its first sight; tool and interaction
// records under stable ids, so a retry upserts.
func (t *turnMirror) record(ctx context.Context, ev wire.Event, at time.Time) {
	if ev.Type == wire.EventToolCall && ev.ID != "" {
		if t.openTool != nil && t.openTool.id == ev.ID {
			t.openTool.ev = ev
			return
		}
		t.flushTool(ctx)
		t.openTool = &openTool{id: ev.ID, index: t.index, ev: ev, at: at}
		t.index++
		return
	}
	t.flushTool(ctx)
	switch ev.Type {
	case wire.EventMessageStart, wire.EventThoughtStart:
		t.msgs[familyKey(ev)] = &strings.Builder{}
		return
	case wire.EventMessageDelta, wire.EventThoughtDelta:
		if acc := t.msgs[familyKey(ev)]; acc != nil {
			acc.WriteString(ev.Delta)
			return
		}
	case wire.EventMessageEnd, wire.EventThoughtEnd:
		key := familyKey(ev)
		if acc := t.msgs[key]; acc != nil {
			delete(t.msgs, key)
			typ := wire.EventMessage
			if ev.Type == wire.EventThoughtEnd {
				typ = "thought"
			}
			t.post(ctx, "agent", map[string]any{"type": typ, "text": acc.String()}, "", at)
			return
		}
	case wire.EventToolResult, wire.EventInteractionReq, wire.EventInteractionRes:
		if ev.ID != "" {
			t.post(ctx, "agent", ev, stableRecordID(t.b.SessionID, ev.ID, ev.Type, t.b.TurnID), at)
			return
		}
	}
	t.post(ctx, "agent", ev, "", at)
}

func (t *turnMirror) flushTool(ctx context.Context) {
	o := t.openTool
	if o == nil {
		return
	}
	t.openTool = nil
	t.postAt(ctx, o.index, "agent", o.ev, stableRecordID(t.b.SessionID, o.id, wire.EventToolCall, t.b.TurnID), o.at)
}

func (t *turnMirror) post(ctx context.Context, source string, attrs any, id string, at time.Time) {
	i := t.index
	t.index++
	t.postAt(ctx, i, source, attrs, id, at)
}

func (t *turnMirror) postAt(ctx context.Context, index int, source string, attrs any, id string, at time.Time) {
	raw, err := json.Marshal(attrs)
	if err != nil {
		return
	}
	var typ struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &typ)
	r := platform.Record{SessionID: t.b.SessionID, RecordID: id, RecordIndex: index, Timestamp: at, RecordSource: source,
		RecordType: typ.Type, Attributes: raw, TurnID: t.b.TurnID, SpanID: t.spanID}
	_ = t.m.q.deliver(ctx, "records/ingest", func(ctx context.Context) error { return t.conn.IngestRecord(ctx, r) })
}

// interaction creates the platform's row for an approval or client tool
// request, so mobile, the inspector and the API's respond flow see it.
func (t *turnMirror) interaction(ev wire.Event) {
	if ev.ID == "" {
		return
	}
	var p struct {
		ToolCallID string          `json:"toolCallId"`
		ToolName   string          `json:"toolName"`
		Input      json.RawMessage `json:"input"`
		ToolCall   *struct {
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"toolCall"`
	}
	_ = json.Unmarshal(ev.Payload, &p)
	tool, args := p.ToolName, p.Input
	if p.ToolCall != nil {
		if tool == "" {
			tool = p.ToolCall.Name
		}
		if len(args) == 0 {
			args = p.ToolCall.Input
		}
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	data := map[string]any{"request": map[string]any{"tool": tool, "args": args, "tool_call_id": p.ToolCallID}}
	if refs := workflowRefMap(t.b.Request.RunContext); len(refs) > 0 {
		data["references"] = refs
	}
	if ep := t.b.Request.EffectiveParams; len(ep) > 0 && string(ep) != "null" && string(ep) != "{}" {
		data["parameters"] = ep
	}
	raw, _ := json.Marshal(data)
	kind := ev.Kind
	if kind == "" {
		kind = "user_approval"
	}
	i := platform.Interaction{SessionID: t.b.SessionID, TurnID: t.b.TurnID, Token: ev.ID, Kind: kind, Data: raw, Flags: json.RawMessage(`{"delivered_in_band":true}`)}
	t.push("interactions", func(ctx context.Context) error { return t.conn.CreateInteraction(ctx, i) })
}

// resolve marks an answered approval resolved on the platform.
func (t *turnMirror) resolve(ev wire.Event) {
	if ev.ID == "" || (ev.Kind != "" && ev.Kind != "user_approval") {
		return
	}
	var p struct {
		Approved   bool   `json:"approved"`
		ToolCallID string `json:"toolCallId"`
	}
	_ = json.Unmarshal(ev.Payload, &p)
	verdict := "denied"
	if p.Approved {
		verdict = "approved"
	}
	tr := platform.Transition{SessionID: t.b.SessionID, Token: ev.ID, Status: "resolved", Resolution: &platform.Resolution{Verdict: verdict, ToolCallID: p.ToolCallID}}
	t.m.q.push(t.b.SessionID, func(ctx context.Context) {
		// One attempt, as the reference: the platform's CAS decides, and a
		// row already terminal answers 404.
		err := t.conn.TransitionInteraction(ctx, tr)
		t.m.cfg.Metrics.PlatformCall("interactions/transition", err)
		var se *StatusError
		if err != nil && !(errors.As(err, &se) && se.Code == 404) {
			t.m.cfg.Logger.Warn("platform interaction transition failed", "session", t.b.SessionID, "token", ev.ID, "err", err)
		}
	})
}

func familyKey(ev wire.Event) string {
	if strings.HasPrefix(ev.Type, "thought") {
		return "thought:" + ev.ID
	}
	return "message:" + ev.ID
}

// runnerOnlyData are this runner's own data events, which the platform's
// records do not carry.
func runnerOnlyData(ev wire.Event) bool {
	return ev.Type == wire.EventData && (strings.HasPrefix(ev.Name, "agent-session") || strings.HasPrefix(ev.Name, "audit."))
}

// answeredTokens are the interaction tokens the request answers in-band:
// cancel-stale spares them (the resume resolves them).
func answeredTokens(req *wire.Request) []string {
	if len(req.Messages) == 0 {
		return nil
	}
	var out []string
	for _, b := range req.Messages[len(req.Messages)-1].Content.Blocks {
		if b.Type != "tool_result" {
			continue
		}
		var v struct {
			Token string `json:"interactionToken"`
		}
		raw := b.Output
		var s string
		if json.Unmarshal(raw, &s) == nil {
			raw = json.RawMessage(s)
		}
		if json.Unmarshal(raw, &v) == nil && v.Token != "" {
			out = append(out, v.Token)
		}
	}
	return out
}

// spareTokens is the union of the tokens, in order, without repeats.
func spareTokens(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, s := range l {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func attachmentRefs(blocks []wire.ContentBlock) []map[string]any {
	out := []map[string]any{}
	for _, b := range blocks {
		a := map[string]any{"attachmentId": b.AttachmentID}
		if b.Filename != "" {
			a["filename"] = b.Filename
		}
		if b.MimeType != "" {
			a["mediaType"] = b.MimeType
		}
		if b.Size > 0 {
			a["size"] = b.Size
		}
		out = append(out, a)
	}
	return out
}

func attachmentIDs(blocks []wire.ContentBlock) []string {
	var out []string
	for _, b := range blocks {
		out = append(out, b.AttachmentID)
	}
	return out
}

// sessionName proposes a title for an untitled session: the first user
// text, at most 60 code points.
func sessionName(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	if r := []rune(text); len(r) > 60 {
		return string(r[:60])
	}
	return text
}

type workflowIdentity struct {
	Artifact *platform.Reference `json:"artifact"`
	Variant  *platform.Reference `json:"variant"`
	Revision *platform.Reference `json:"revision"`
}

func workflowOf(rc *wire.RunContext) workflowIdentity {
	var w workflowIdentity
	if rc != nil && len(rc.Workflow) > 0 {
		_ = json.Unmarshal(rc.Workflow, &w)
	}
	return w
}

// workflowRefMap is the run's workflow references keyed as the
// interactions plane wants them.
func workflowRefMap(rc *wire.RunContext) map[string]platform.Reference {
	w := workflowOf(rc)
	out := map[string]platform.Reference{}
	for k, r := range map[string]*platform.Reference{"workflow": w.Artifact, "workflow_variant": w.Variant, "workflow_revision": w.Revision} {
		if r != nil {
			out[k] = *r
		}
	}
	return out
}

// workflowRefs is the same as a list with keys, for streams and turns.
func workflowRefs(rc *wire.RunContext) []platform.Reference {
	w := workflowOf(rc)
	var out []platform.Reference
	for _, kr := range []struct {
		key string
		r   *platform.Reference
	}{{"workflow", w.Artifact}, {"workflow_variant", w.Variant}, {"workflow_revision", w.Revision}} {
		if kr.r != nil {
			r := *kr.r
			r.Key = kr.key
			out = append(out, r)
		}
	}
	return out
}

func traceSpanID(raw json.RawMessage) string {
	var v struct {
		SpanID string `json:"span_id"`
	}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &v)
	}
	return v.SpanID
}

// recordNamespace is uuid5(uuid5(DNS, "agenta"), "records"), the
// namespace of the reference runner's stable record ids.
var recordNamespace = uuid5(uuid5(dnsNamespace, "agenta"), "records")

var dnsNamespace = [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// stableRecordID is the reference runner's id for a tool-family record:
// one id per (session, tool call, type, turn), so retries upsert.
func stableRecordID(session, callID, typ, turn string) string {
	u := uuid5(recordNamespace, session+":"+callID+":"+typ+":"+turn)
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// uuid5 is RFC 4122 version 5 (SHA-1 of namespace and name).
func uuid5(ns [16]byte, name string) [16]byte {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}
