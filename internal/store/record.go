package store

import (
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// SessionStatus is whether a session is in use.
type SessionStatus string

const (
	SessionActive  SessionStatus = "active"
	SessionDeleted SessionStatus = "deleted"
)

// SessionKey names a session. A session id is the caller's and unique only
// within its project: the same id in two projects is two sessions, with
// two ledgers, logs and leases. The empty project is the one of requests
// that name none.
type SessionKey struct {
	ProjectID string
	SessionID string
}

// String is the key as messages show it: project/session, or the session
// alone in the empty project.
func (k SessionKey) String() string {
	if k.ProjectID == "" {
		return k.SessionID
	}
	return k.ProjectID + "/" + k.SessionID
}

// Session is one caller session (the request's sessionId in its project).
type Session struct {
	ID        string
	ProjectID string
	Harness   string
	Status    SessionStatus
	// SandboxProvider and SandboxID name the session's current sandbox.
	SandboxProvider string
	SandboxID       string
	// AgentSessionID is the harness's own session id (for session/load).
	AgentSessionID string
	// LastTurnIndex is the highest index BeginTurn recorded, -1 before the
	// first turn; the next turn is LastTurnIndex+1.
	LastTurnIndex int
	// LastSeq is the sequence number of the session's last event, 0 when
	// it has none.
	LastSeq   int64
	CreatedAt time.Time
	// UpdatedAt changes on PutSession and BeginTurn, not on AppendEvents.
	UpdatedAt time.Time
	// Generation fences PutSession: when above 0, the write is refused
	// (a *FencedError) once the session's lease generation is past it. It
	// is not stored; read back as 0.
	Generation int64
}

// Key is the session's key.
func (s Session) Key() SessionKey { return SessionKey{ProjectID: s.ProjectID, SessionID: s.ID} }

// Validate reports whether s can be stored.
func (s Session) Validate() error {
	if s.ID == "" {
		return errdefs.Invalidf("session: empty id")
	}
	switch s.Status {
	case SessionActive, SessionDeleted:
		return nil
	}
	return errdefs.Invalidf("session %s: unknown status %q", s.ID, s.Status)
}

// SessionQuery selects sessions; zero fields match everything.
type SessionQuery struct {
	ProjectID string // "" matches every project, not only the empty one
	ID        string // the session id, in whichever project
	Status    SessionStatus
	Limit     int // <= 0: no limit
}

// TurnStatus is where a turn is in its life.
type TurnStatus string

const (
	TurnRunning   TurnStatus = "running"
	TurnCompleted TurnStatus = "completed"
	TurnPaused    TurnStatus = "paused"
	TurnFailed    TurnStatus = "failed"
	TurnCancelled TurnStatus = "cancelled"
	// TurnInterrupted marks a turn whose replica stopped while it ran.
	TurnInterrupted TurnStatus = "interrupted"
)

// Ended reports whether s is an outcome EndTurn accepts: every known
// status but running.
func (s TurnStatus) Ended() bool {
	switch s {
	case TurnCompleted, TurnPaused, TurnFailed, TurnCancelled, TurnInterrupted:
		return true
	}
	return false
}

// Turn is one row of the turn ledger.
type Turn struct {
	ProjectID       string
	SessionID       string
	Index           int // 0 for the session's first turn
	TurnID          string
	Harness         string
	AgentSessionID  string
	SandboxProvider string
	SandboxID       string
	Status          TurnStatus
	StartedAt       time.Time
	EndedAt         time.Time // zero while running
	Usage           wire.Usage
	StopReason      string
	Error           string
	// Owner is the id of the replica that runs the turn.
	Owner string
	// Generation fences the write (BeginTurn, EndTurn, the TurnWriter's):
	// when above 0, it is refused (a *FencedError, nothing written) once
	// the session's lease generation is past it. It is not stored; read
	// back as 0.
	Generation int64
}

// Key is the key of the turn's session.
func (t Turn) Key() SessionKey { return SessionKey{ProjectID: t.ProjectID, SessionID: t.SessionID} }

func (t Turn) validate() error {
	if t.SessionID == "" {
		return errdefs.Invalidf("turn: empty session id")
	}
	if t.Index < 0 {
		return errdefs.Invalidf("turn %s/%d: negative index", t.Key(), t.Index)
	}
	return nil
}

// ValidateBegin reports whether t can be begun.
func (t Turn) ValidateBegin() error { return t.validate() }

// ValidateEnd reports whether t can be recorded as an outcome.
func (t Turn) ValidateEnd() error {
	if err := t.validate(); err != nil {
		return err
	}
	if !t.Status.Ended() {
		return errdefs.Invalidf("turn %s/%d: %q is not an outcome", t.Key(), t.Index, t.Status)
	}
	return nil
}

// Event is one entry of a session's event log.
type Event struct {
	Seq       int64 // assigned by AppendEvents
	TurnIndex int
	Time      time.Time
	Event     wire.Event
}

// SandboxState is the last known state of a sandbox.
type SandboxState string

const (
	SandboxRunning   SandboxState = "running"
	SandboxPaused    SandboxState = "paused"
	SandboxDestroyed SandboxState = "destroyed"
)

// Sandbox records a sandbox the runner created.
type Sandbox struct {
	Provider  string
	ID        string
	ProjectID string // of the session
	SessionID string
	State     SandboxState
	Labels    map[string]string // nil when empty
	CreatedAt time.Time
	UpdatedAt time.Time
}

// SessionKey is the key of the sandbox's session.
func (sb Sandbox) SessionKey() SessionKey {
	return SessionKey{ProjectID: sb.ProjectID, SessionID: sb.SessionID}
}

// Validate reports whether sb can be stored.
func (sb Sandbox) Validate() error {
	if sb.Provider == "" || sb.ID == "" {
		return errdefs.Invalidf("sandbox %q/%q: empty provider or id", sb.Provider, sb.ID)
	}
	switch sb.State {
	case SandboxRunning, SandboxPaused, SandboxDestroyed:
		return nil
	}
	return errdefs.Invalidf("sandbox %s/%s: unknown state %q", sb.Provider, sb.ID, sb.State)
}

// SandboxQuery selects sandboxes; zero fields match everything.
type SandboxQuery struct {
	Provider  string
	State     SandboxState
	ProjectID string // "" matches every project
	SessionID string
}

// Secret records a provider-side secret the runner created.
type Secret struct {
	Provider  string
	ID        string
	Name      string
	ProjectID string // of the session
	SessionID string
	CreatedAt time.Time
}

// Validate reports whether s can be stored.
func (s Secret) Validate() error {
	if s.Provider == "" || s.ID == "" {
		return errdefs.Invalidf("secret %q/%q: empty provider or id", s.Provider, s.ID)
	}
	return nil
}

// SecretQuery selects secrets; zero fields match everything.
type SecretQuery struct {
	Provider  string
	ProjectID string // "" matches every project
	SessionID string
}

// Lease is a replica's claim on a session.
type Lease struct {
	ProjectID string
	SessionID string
	Owner     string
	Expires   time.Time
	// Generation is the fencing token: 1 for the session's first owner,
	// raised on every change of owner, kept by a renewal.
	Generation int64
}

// Key is the lease's session key.
func (l Lease) Key() SessionKey { return SessionKey{ProjectID: l.ProjectID, SessionID: l.SessionID} }

// ValidateLease reports whether a lease request is well formed.
func ValidateLease(k SessionKey, owner string, ttl time.Duration) error {
	if k.SessionID == "" || owner == "" {
		return errdefs.Invalidf("lease %q: empty session or owner", k)
	}
	if ttl < time.Millisecond {
		return errdefs.Invalidf("lease %s: ttl %v is under 1ms", k, ttl)
	}
	return nil
}

// ValidateTakeOver reports whether a takeover request is well formed.
func ValidateTakeOver(k SessionKey, owner string, from Lease, ttl time.Duration) error {
	if err := ValidateLease(k, owner, ttl); err != nil {
		return err
	}
	if from.Owner == "" || from.Generation < 1 {
		return errdefs.Invalidf("lease %s: a takeover needs the lease it replaces (owner and generation), not %q at %d", k, from.Owner, from.Generation)
	}
	return nil
}

// LeaseError reports a session leased to another owner. It wraps
// errdefs.ErrConflict.
type LeaseError struct {
	ProjectID  string
	SessionID  string
	Owner      string
	Expires    time.Time
	Generation int64
}

// Lease is the holder's lease as the error reports it: what a takeover
// compares against.
func (e *LeaseError) Lease() Lease {
	return Lease{ProjectID: e.ProjectID, SessionID: e.SessionID, Owner: e.Owner, Expires: e.Expires, Generation: e.Generation}
}

func (e *LeaseError) Error() string {
	return fmt.Sprintf("session %s is leased to %s until %s", SessionKey{ProjectID: e.ProjectID, SessionID: e.SessionID}, e.Owner, e.Expires.Format(time.RFC3339Nano))
}

func (e *LeaseError) Unwrap() error { return errdefs.ErrConflict }

// Replica is one row of the replica registry (Replicas).
type Replica struct {
	ID string
	// AdvertiseURL is where the other replicas reach this one.
	AdvertiseURL string
	StartedAt    time.Time
	// HeartbeatAt is when the replica last wrote its row.
	HeartbeatAt time.Time
	// Draining is set once the replica stops taking new sessions.
	Draining bool
}

// Validate reports whether r can be stored.
func (r Replica) Validate() error {
	if r.ID == "" {
		return errdefs.Invalidf("replica: empty id")
	}
	return nil
}

// FencedError reports a write refused because the session's lease moved
// past the writer's generation: another replica took the session over.
// It wraps errdefs.ErrFenced.
type FencedError struct {
	ProjectID string
	SessionID string
	// Generation is the writer's.
	Generation int64
	// Holder is the lease as the refusal found it; its Owner is empty
	// when the new owner has released it since.
	Holder Lease
}

func (e *FencedError) Error() string {
	by := "another replica"
	if e.Holder.Owner != "" {
		by = "replica " + e.Holder.Owner
	}
	return fmt.Sprintf("session %s was taken over by %s (lease generation %d, this writer's %d): the write was refused", SessionKey{ProjectID: e.ProjectID, SessionID: e.SessionID}, by, e.Holder.Generation, e.Generation)
}

func (e *FencedError) Unwrap() error { return errdefs.ErrFenced }

// Fenced returns the *FencedError refusing a write of generation gen to
// session k under the lease l, or nil when l does not refuse it: gen 0
// (an unfenced write) or at or above l's generation.
func Fenced(k SessionKey, gen int64, l Lease) error {
	if gen <= 0 || l.Generation <= gen {
		return nil
	}
	return &FencedError{ProjectID: k.ProjectID, SessionID: k.SessionID, Generation: gen, Holder: l}
}

// Resume is the state a paused turn resumes from (Resumes).
type Resume struct {
	ProjectID string
	SessionID string
	// Request is the paused turn's request, JSON, without its secrets.
	Request []byte
	// Secrets is set when the request carried secrets that were not
	// stored: a resume needs them from memory or from a new request.
	Secrets   bool
	CreatedAt time.Time
}

// Key is the resume's session key.
func (r Resume) Key() SessionKey { return SessionKey{ProjectID: r.ProjectID, SessionID: r.SessionID} }
