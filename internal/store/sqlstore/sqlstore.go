package sqlstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/store"
)

// Scanner is one row: *sql.Row, *sql.Rows, pgx.Row or pgx.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Rows is a result set being read: *sql.Rows or pgx.Rows. Closing it is
// the caller's (the two drivers' Close differ).
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Collect scans every row of rows with scan.
func Collect[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// MS is t as unix milliseconds; the zero time is 0.
func MS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMS is the inverse of MS, in UTC.
func FromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// NowMS is the stores' clock for CreatedAt and UpdatedAt.
func NowMS() int64 { return time.Now().UnixMilli() }

// SessionCols are the columns ScanSession reads, in its order.
const SessionCols = `id, project_id, harness, status, sandbox_provider, sandbox_id,
	agent_session_id, last_turn_index, last_seq, created_at, updated_at`

// ScanSession reads a row of SessionCols.
func ScanSession(r Scanner) (store.Session, error) {
	var s store.Session
	var status string
	var created, updated int64
	err := r.Scan(&s.ID, &s.ProjectID, &s.Harness, &status, &s.SandboxProvider, &s.SandboxID,
		&s.AgentSessionID, &s.LastTurnIndex, &s.LastSeq, &created, &updated)
	s.Status = store.SessionStatus(status)
	s.CreatedAt, s.UpdatedAt = FromMS(created), FromMS(updated)
	return s, err
}

// TurnCols are the columns ScanTurn reads, in its order (also the turns
// table's column order for inserts).
const TurnCols = `project_id, session_id, turn_index, turn_id, harness, agent_session_id, sandbox_provider,
	sandbox_id, status, started_at, ended_at, input_tokens, output_tokens, total_tokens, cost,
	stop_reason, error, owner`

// ScanTurn reads a row of TurnCols.
func ScanTurn(r Scanner) (store.Turn, error) {
	var t store.Turn
	var status string
	var started, ended int64
	err := r.Scan(&t.ProjectID, &t.SessionID, &t.Index, &t.TurnID, &t.Harness, &t.AgentSessionID, &t.SandboxProvider,
		&t.SandboxID, &status, &started, &ended, &t.Usage.Input, &t.Usage.Output, &t.Usage.Total, &t.Usage.Cost,
		&t.StopReason, &t.Error, &t.Owner)
	t.Status = store.TurnStatus(status)
	t.StartedAt, t.EndedAt = FromMS(started), FromMS(ended)
	return t, err
}

// ScanEvent reads a row of seq, turn_index, at and the event's JSON
// (as text or bytes).
func ScanEvent(r Scanner) (store.Event, error) {
	var e store.Event
	var at int64
	var data []byte
	if err := r.Scan(&e.Seq, &e.TurnIndex, &at, &data); err != nil {
		return e, err
	}
	e.Time = FromMS(at)
	if err := json.Unmarshal(data, &e.Event); err != nil {
		return e, fmt.Errorf("event %d: %w", e.Seq, err)
	}
	return e, nil
}

// SandboxCols are the columns ScanSandbox reads, in its order.
const SandboxCols = `provider, id, project_id, session_id, state, labels, created_at, updated_at`

// ScanSandbox reads a row of SandboxCols; labels are JSON.
func ScanSandbox(r Scanner) (store.Sandbox, error) {
	var sb store.Sandbox
	var state string
	var labels []byte
	var created, updated int64
	if err := r.Scan(&sb.Provider, &sb.ID, &sb.ProjectID, &sb.SessionID, &state, &labels, &created, &updated); err != nil {
		return sb, err
	}
	sb.State = store.SandboxState(state)
	sb.CreatedAt, sb.UpdatedAt = FromMS(created), FromMS(updated)
	if err := json.Unmarshal(labels, &sb.Labels); err != nil {
		return sb, fmt.Errorf("sandbox %s/%s labels: %w", sb.Provider, sb.ID, err)
	}
	if len(sb.Labels) == 0 {
		sb.Labels = nil
	}
	return sb, nil
}

// SecretCols are the columns ScanSecret reads, in its order.
const SecretCols = `provider, id, name, project_id, session_id, created_at`

// ScanSecret reads a row of SecretCols.
func ScanSecret(r Scanner) (store.Secret, error) {
	var sec store.Secret
	var created int64
	err := r.Scan(&sec.Provider, &sec.ID, &sec.Name, &sec.ProjectID, &sec.SessionID, &created)
	sec.CreatedAt = FromMS(created)
	return sec, err
}

// LeaseCols are the columns ScanLease and HeldBy read, in their order.
// A lease row outlives its release, to keep the session's generation:
// a free lease is a row whose owner is FreeOwner.
const LeaseCols = `owner, expires_at, generation`

// FreeOwner is the owner of a released lease's row.
const FreeOwner = ""

// ScanLease reads a row of LeaseCols as session k's lease.
func ScanLease(r Scanner, k store.SessionKey) (store.Lease, error) {
	out := store.Lease{ProjectID: k.ProjectID, SessionID: k.SessionID}
	var expires int64
	if err := r.Scan(&out.Owner, &expires, &out.Generation); err != nil {
		return store.Lease{}, err
	}
	out.Expires = FromMS(expires)
	return out, nil
}

// HeldBy reads a row of LeaseCols as the *store.LeaseError naming session
// k's current holder; a failed scan (no row: no holder) returns its error.
func HeldBy(r Scanner, k store.SessionKey) error {
	l, err := ScanLease(r, k)
	if err != nil {
		return err
	}
	return &store.LeaseError{ProjectID: l.ProjectID, SessionID: l.SessionID, Owner: l.Owner, Expires: l.Expires, Generation: l.Generation}
}

// ReplicaCols are the columns ScanReplica reads, in its order.
const ReplicaCols = `id, advertise_url, started_at, heartbeat_at, draining`

// ScanReplica reads a row of ReplicaCols.
func ScanReplica(r Scanner) (store.Replica, error) {
	var out store.Replica
	var started, beat int64
	if err := r.Scan(&out.ID, &out.AdvertiseURL, &started, &beat, &out.Draining); err != nil {
		return store.Replica{}, err
	}
	out.StartedAt, out.HeartbeatAt = FromMS(started), FromMS(beat)
	return out, nil
}

// ResumeCols are the columns ScanResume reads, in its order.
const ResumeCols = `request, secrets, created_at`

// ScanResume reads a row of ResumeCols as session k's resume.
func ScanResume(r Scanner, k store.SessionKey) (store.Resume, error) {
	out := store.Resume{ProjectID: k.ProjectID, SessionID: k.SessionID}
	var created int64
	if err := r.Scan(&out.Request, &out.Secrets, &created); err != nil {
		return store.Resume{}, err
	}
	out.CreatedAt = FromMS(created)
	return out, nil
}
