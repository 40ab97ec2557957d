// Package platform is the family of clients of the platform the runner
// serves turns for (Agenta's API): the calls the reference runner makes
// back to it (records, heartbeats, interactions, turns, attachments,
// mount signing), as small interfaces over plain types, and the seams a
// turn offers its observers (Observer and its optional abilities,
// observe.go), so that the clients need not import the turn's package.
// The runner's own store stays the source of truth; the platform is a
// mirror.
package platform

import (
	"context"
	"encoding/json"
	"time"
)

// Record is one durable session record (POST /sessions/records/ingest).
type Record struct {
	SessionID    string          `json:"session_id"`
	RecordID     string          `json:"record_id,omitempty"`
	RecordIndex  int             `json:"record_index"`
	Timestamp    time.Time       `json:"timestamp"`
	RecordSource string          `json:"record_source"`
	RecordType   string          `json:"record_type"`
	Attributes   json.RawMessage `json:"attributes"`
	TurnID       string          `json:"turn_id,omitempty"`
	SpanID       string          `json:"span_id,omitempty"`
}

// Reference is a platform entity reference (workflow, variant, revision).
type Reference struct {
	ID      string `json:"id,omitempty"`
	Slug    string `json:"slug,omitempty"`
	Version string `json:"version,omitempty"`
	Key     string `json:"key,omitempty"`
}

// Heartbeat is one beat of a session's stream (POST /sessions/streams/heartbeat).
// Without TurnID it only claims the session's owner key.
type Heartbeat struct {
	SessionID  string      `json:"session_id"`
	ReplicaID  string      `json:"replica_id"`
	TurnID     string      `json:"turn_id,omitempty"`
	IsRunning  bool        `json:"is_running"`
	Name       string      `json:"name,omitempty"`
	References []Reference `json:"references,omitempty"`
}

// HeartbeatReply is the platform's answer to a beat.
type HeartbeatReply struct {
	StreamID  string
	ProjectID string
	// ReplicaID owns the session's affinity key after the claim.
	ReplicaID string
	// CurrentTurn is false once the turn was cancelled, steered or
	// killed on the platform: the runner must stop it.
	CurrentTurn bool
}

// Interaction is an approval (or client tool) raised by a turn
// (POST /sessions/interactions/).
type Interaction struct {
	SessionID string          `json:"session_id"`
	TurnID    string          `json:"turn_id"`
	Token     string          `json:"token"`
	Kind      string          `json:"kind"`
	Data      json.RawMessage `json:"data"`
	Flags     json.RawMessage `json:"flags,omitempty"`
}

// Transition moves an interaction to a status (POST /sessions/interactions/transition).
type Transition struct {
	SessionID  string      `json:"session_id"`
	Token      string      `json:"token"`
	Status     string      `json:"status"`
	Resolution *Resolution `json:"resolution,omitempty"`
}

// Resolution is an approval's verdict.
type Resolution struct {
	Verdict    string `json:"verdict"` // approved | denied
	ToolCallID string `json:"tool_call_id"`
}

// CancelStale cancels a session's pending interactions but this turn's
// and the listed tokens (POST /sessions/interactions/cancel-stale).
type CancelStale struct {
	SessionID string   `json:"session_id"`
	TurnID    string   `json:"turn_id"`
	Tokens    []string `json:"tokens,omitempty"`
}

// TurnStart is a turn's row in the platform's turns ledger (POST /sessions/turns/).
type TurnStart struct {
	SessionID      string      `json:"session_id"`
	StreamID       string      `json:"stream_id,omitempty"`
	TurnID         string      `json:"turn_id,omitempty"`
	TurnIndex      int         `json:"turn_index"`
	HarnessKind    string      `json:"harness_kind"`
	AgentSessionID string      `json:"agent_session_id,omitempty"`
	SandboxID      string      `json:"sandbox_id,omitempty"`
	References     []Reference `json:"references,omitempty"`
	TraceID        string      `json:"trace_id,omitempty"`
	SpanID         string      `json:"span_id,omitempty"`
	StartTime      time.Time   `json:"start_time"`
}

// TurnComplete closes a turn in the ledger (POST /sessions/turns/complete).
type TurnComplete struct {
	SessionID      string    `json:"session_id"`
	TurnIndex      int       `json:"turn_index"`
	AgentSessionID string    `json:"agent_session_id,omitempty"`
	EndTime        time.Time `json:"end_time"`
}

// Attachment is an uploaded file's content (GET /sessions/attachments/{id}/content).
type Attachment struct {
	Filename  string
	MediaType string
	Data      []byte
}

// MountCredentials are short-lived S3 credentials scoped to one mount's
// prefix (POST /sessions/mounts/sign, POST /mounts/agents/sign).
type MountCredentials struct {
	MountID      string
	ProjectID    string
	Endpoint     string
	Region       string
	Bucket       string
	Prefix       string // no trailing slash
	AccessKey    string
	SecretKey    string
	SessionToken string
	ExpiresAt    time.Time
}

// Records writes session records.
type Records interface {
	IngestRecord(ctx context.Context, r Record) error
}

// Streams beats a session's stream.
type Streams interface {
	Heartbeat(ctx context.Context, h Heartbeat) (HeartbeatReply, error)
}

// Interactions is the approvals plane.
type Interactions interface {
	CreateInteraction(ctx context.Context, i Interaction) error
	TransitionInteraction(ctx context.Context, t Transition) error
	CancelStaleInteractions(ctx context.Context, c CancelStale) error
}

// Turns is the platform's turns ledger.
type Turns interface {
	StartTurn(ctx context.Context, t TurnStart) error
	CompleteTurn(ctx context.Context, t TurnComplete) error
}

// Attachments reads uploaded files and claims them for a session.
type Attachments interface {
	FetchAttachment(ctx context.Context, sessionID, id string) (Attachment, error)
	ReferenceAttachments(ctx context.Context, sessionID string, ids []string) error
}

// MountSigner signs durable mounts: a session's (name "cwd" by default)
// and an agent's (artifact id, name "default" by default). A mount the
// platform cannot sign (storage not configured, no permission) is an
// error wrapping errdefs.ErrUnavailable or ErrNotFound.
type MountSigner interface {
	SignSessionMount(ctx context.Context, sessionID, name string) (MountCredentials, error)
	SignAgentMount(ctx context.Context, artifactID, name string) (MountCredentials, error)
}

// Stats counts the mirror's work, for metrics.
type Stats struct {
	Queued  int64 // calls waiting now
	Sent    int64 // calls the platform accepted
	Retried int64 // attempts that failed and were retried
	Dropped int64 // calls given up (queue full, or refused by the platform)
	// Unanswered counts the owner claims a cold turn awaited that the
	// platform failed or did not answer in time (the turn went on).
	Unanswered int64
}
