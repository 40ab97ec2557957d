package store

import (
	"context"
	"errors"
	"time"
)

// Store is everything the runner keeps durably.
type Store interface {
	Sessions
	Turns
	Events
	Sandboxes
	Secrets
	Leases
	Replicas
	// Close releases the store's connections. Calls after Close fail.
	Close() error
}

// Sessions records one row per caller session.
type Sessions interface {
	// PutSession creates the session (s.Key()) or replaces its mutable
	// fields (harness, status, sandbox, agent session) and returns the
	// stored record. CreatedAt, UpdatedAt, LastTurnIndex and LastSeq are
	// kept by the store; their values in s are ignored.
	PutSession(ctx context.Context, s Session) (Session, error)
	// GetSession returns the session, or an error wrapping ErrNotFound.
	GetSession(ctx context.Context, k SessionKey) (Session, error)
	// ListSessions returns the sessions matching q, most recently updated
	// first; an empty q.ProjectID matches every project.
	ListSessions(ctx context.Context, q SessionQuery) ([]Session, error)
}

// Turns is the append-only turn ledger: one row per (project, session,
// index).
type Turns interface {
	// BeginTurn records t as running and raises the session's
	// LastTurnIndex to t.Index. It fails with ErrNotFound if the session
	// does not exist and with ErrConflict if the index is taken: of two
	// racing turns exactly one begins. t.Status and the end fields are
	// ignored.
	BeginTurn(ctx context.Context, t Turn) (Turn, error)
	// EndTurn records the outcome of the turn (t.Key(), t.Index):
	// status (not running), end time, usage, stop reason, error, and the
	// agent session and sandbox known by then. It succeeds only while the
	// stored turn is running or paused (a paused turn may resume and end
	// again); otherwise the first outcome stands and it fails with
	// ErrConflict.
	EndTurn(ctx context.Context, t Turn) (Turn, error)
	// GetTurn returns one turn, or an error wrapping ErrNotFound.
	GetTurn(ctx context.Context, k SessionKey, index int) (Turn, error)
	// ListTurns returns the session's turns by ascending index; an unknown
	// session is ErrNotFound.
	ListTurns(ctx context.Context, k SessionKey) ([]Turn, error)
	// InterruptTurns marks every running turn owned by owner as
	// interrupted, ended at at, and returns how many it marked. A replica
	// calls it for its own id at start-up, before it takes new turns.
	InterruptTurns(ctx context.Context, owner string, at time.Time) (int, error)
}

// Events is the per-session event log.
type Events interface {
	// AppendEvents appends evs to the session's log in one transaction and
	// returns the session's last sequence number: evs[i] gets
	// last-len(evs)+1+i. Numbers start at 1 and have no gaps, whatever the
	// number of concurrent appenders. Seq in evs is ignored. An unknown
	// session is ErrNotFound.
	AppendEvents(ctx context.Context, k SessionKey, evs []Event) (last int64, err error)
	// AppendFencedEvents is AppendEvents by a writer holding the session's
	// lease at generation gen: refused (a *FencedError, nothing written)
	// once the lease's generation is past gen. gen 0 is AppendEvents.
	AppendFencedEvents(ctx context.Context, k SessionKey, gen int64, evs []Event) (last int64, err error)
	// ReadEvents returns up to limit events with Seq > after, in order;
	// limit <= 0 means all. An unknown session is ErrNotFound.
	ReadEvents(ctx context.Context, k SessionKey, after int64, limit int) ([]Event, error)
}

// TurnWriter is an optional ability of a Store: a turn's ledger rows
// written in the transactions of its events, so that beginning and ending
// a turn cost no commits of their own.
type TurnWriter interface {
	// BeginTurnWithEvents records t as BeginTurn does and appends evs as
	// AppendEvents does, in one transaction; a refused begin (ErrNotFound,
	// ErrConflict) writes nothing. It returns the session's last sequence
	// number.
	BeginTurnWithEvents(ctx context.Context, t Turn, evs []Event) (int64, error)
	// EndTurnWithEvents appends evs to the session's log as AppendEvents
	// does and records the outcome t as EndTurn does, in one transaction.
	// The events are written even when the outcome is refused (the first
	// outcome stands: ErrConflict, or ErrNotFound for a missing turn). It
	// returns the stored turn and the session's last sequence number; a
	// failed write leaves neither written.
	EndTurnWithEvents(ctx context.Context, t Turn, evs []Event) (Turn, int64, error)
	// WriteTurnWithEvents is a whole turn in one transaction: begin as
	// BeginTurnWithEvents, evs, then the outcome end as EndTurnWithEvents.
	// A refused begin writes nothing and its error wraps ErrNotBegun; a
	// refused outcome leaves the begin and the events written.
	WriteTurnWithEvents(ctx context.Context, begin Turn, evs []Event, end Turn) (Turn, int64, error)
}

// ErrNotBegun marks a WriteTurnWithEvents whose begin was refused.
var ErrNotBegun = errors.New("turn not begun")

// ReplicaLocal is an optional ability of a Store that only this replica
// opens (the embedded SQLite file in its data dir). Its leases keep this
// replica's turns apart but cannot stop another replica, with a store of
// its own, from running the same session; a store shared by the replicas
// (PostgreSQL) does not have the ability.
type ReplicaLocal interface {
	ReplicaLocal() bool
}

// Prober is an optional ability of a Store: a cheap check that it can be
// written now, for readiness. Probe commits a write that changes no data
// and fails, naming the cause, when the store cannot take writes (its
// disk is full or read-only, its server does not answer or is a standby).
type Prober interface {
	Probe(ctx context.Context) error
}

// Sandboxes records the sandboxes the runner created, so that a restarted
// runner can find, reuse or reap them.
type Sandboxes interface {
	// PutSandbox creates or updates the record keyed by (Provider, ID).
	PutSandbox(ctx context.Context, sb Sandbox) (Sandbox, error)
	// GetSandbox returns the record, or an error wrapping ErrNotFound.
	GetSandbox(ctx context.Context, provider, id string) (Sandbox, error)
	// ListSandboxes returns the records matching q, oldest first.
	ListSandboxes(ctx context.Context, q SandboxQuery) ([]Sandbox, error)
	// DeleteSandbox removes the record; a missing one is ErrNotFound.
	DeleteSandbox(ctx context.Context, provider, id string) error
}

// Secrets records provider-side secrets the runner created (Daytona), so
// that orphans can be reaped.
type Secrets interface {
	// PutSecret creates or updates the record keyed by (Provider, ID).
	PutSecret(ctx context.Context, s Secret) (Secret, error)
	// ListSecrets returns the records matching q, oldest first.
	ListSecrets(ctx context.Context, q SecretQuery) ([]Secret, error)
	// DeleteSecret removes the record; a missing one is ErrNotFound.
	DeleteSecret(ctx context.Context, provider, id string) error
}

// Leases say which replica owns a session. The caller supplies the clock:
// a lease is held while now < Expires. Every change of owner raises the
// lease's Generation, the fencing token a turn's writes carry: the store
// refuses a write whose generation the session's lease has moved past.
// A session's generation never goes back, whatever is released.
type Leases interface {
	// AcquireLease gives the session to owner until now+ttl if the lease
	// is free, expired or already owner's (a renewal). A renewal keeps the
	// generation, also of an expired lease nobody took since (no other
	// owner wrote in between); a free or expired lease taken by another
	// owner gets the next one. Otherwise it returns a *LeaseError naming
	// the holder, which wraps ErrConflict.
	AcquireLease(ctx context.Context, k SessionKey, owner string, now time.Time, ttl time.Duration) (Lease, error)
	// TakeOverLease gives the session to owner until now+ttl, with
	// generation from.Generation+1, only while the stored lease is still
	// from's: held by from.Owner at from.Generation, expired or not. It is
	// how a replica takes a session from an owner it found gone. A lease
	// that moved on since from was read is a *LeaseError naming its
	// holder; a free one (released, or never taken) is an error wrapping
	// ErrNotFound: acquire it instead.
	TakeOverLease(ctx context.Context, k SessionKey, owner string, from Lease, now time.Time, ttl time.Duration) (Lease, error)
	// ReleaseLease gives up owner's lease; the session's generation is
	// kept for the next owner to raise. Releasing a lease that does not
	// exist is not an error; one held by another owner is a *LeaseError.
	ReleaseLease(ctx context.Context, k SessionKey, owner string) error
	// GetLease returns the session's lease, expired or not, or an error
	// wrapping ErrNotFound when it is free.
	GetLease(ctx context.Context, k SessionKey) (Lease, error)
}

// Replicas is the registry of the replicas sharing the store: one row per
// replica id, written only by that replica (its heartbeat), read by the
// others to find a session's owner and whether it is alive. The caller
// supplies StartedAt and HeartbeatAt.
type Replicas interface {
	// PutReplica creates or replaces r's row and returns it as stored.
	PutReplica(ctx context.Context, r Replica) (Replica, error)
	// GetReplica returns the replica's row, or an error wrapping
	// ErrNotFound.
	GetReplica(ctx context.Context, id string) (Replica, error)
	// ListReplicas returns every row, by id.
	ListReplicas(ctx context.Context) ([]Replica, error)
	// DeleteReplica removes the replica's row (a clean shutdown); a
	// missing one is not an error.
	DeleteReplica(ctx context.Context, id string) error
}

// Resumes is an optional ability of a Store: what a turn paused for a
// person's approval needs to resume, kept durably so that an answer after
// a restart still resumes it. One record per session: a newer pause
// replaces it.
type Resumes interface {
	// PutResume creates or replaces the session's record. An unknown
	// session is ErrNotFound.
	PutResume(ctx context.Context, r Resume) error
	// GetResume returns the session's record, or an error wrapping
	// ErrNotFound.
	GetResume(ctx context.Context, k SessionKey) (Resume, error)
	// DeleteResume removes the session's record; a missing one is not an
	// error.
	DeleteResume(ctx context.Context, k SessionKey) error
}
