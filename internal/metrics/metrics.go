// Package metrics is what the runner tells its operators' monitoring: an
// Observer the turn path calls at a handful of points (turn end, first
// harness event, tool call, permission decision), and two hooks other
// parts of the runner call when they have something to report:
//
//   - Platform: PlatformCall(op, err) after every call to the Agenta
//     platform (the platform mirror); a non-nil err counts as a failure
//     of op. op is a short fixed name ("sessions.put", "events.append"),
//     never an id.
//   - Checkpoints: Checkpoint(op, d, err) after every workspace
//     checkpoint operation against the store ("save", "restore"), with
//     how long it took.
//
// A caller receives these as a field of its own config, typed with the
// interface here, and treats nil as Nop{}. cmd/runner wires one
// implementation (internal/metrics/prom) to all of them, so they share
// one /metrics.
//
// Every method must be cheap and must not block: they run on the turn
// path. Labels are closed sets (harness and provider names come from the
// launch table and the configured providers; outcomes and ops are
// constants), so the series count stays bounded.
package metrics

import "time"

// Start says how a turn found its harness: warm (kept alive in the pool
// since the session's last turn), prewarmed (a slot started before the
// session, bound to it at claim) or cold (a new sandbox or harness).
type Start string

const (
	StartWarm      Start = "warm"
	StartPrewarmed Start = "prewarmed"
	StartCold      Start = "cold"
)

// Turn outcomes: a closed list.
const (
	OutcomeCompleted = "completed"
	OutcomePaused    = "paused" // waiting for a person's approval
	OutcomeCancelled = "cancelled"
	OutcomeFailed    = "failed"
)

// Turn is one finished turn.
type Turn struct {
	Harness, Provider string
	Outcome           string
	Start             Start
	Duration          time.Duration
}

// Observer is told what the turn path does.
type Observer interface {
	// TurnEnded is called once per admitted turn, after its result is known.
	TurnEnded(Turn)
	// FirstEvent is called once per turn, at the harness's first event,
	// with the time since the turn started.
	FirstEvent(harness, provider string, start Start, d time.Duration)
	// ToolCall is called for every tool call a harness reports.
	ToolCall(harness, provider string)
	// Approval is called for every permission decision: outcome is
	// allowed, denied or asked; by is policy, user or runner.
	Approval(outcome, by string)
}

// Platform is told of every call to the Agenta platform.
type Platform interface {
	PlatformCall(op string, err error)
}

// Checkpoints is told of every workspace checkpoint operation.
type Checkpoints interface {
	Checkpoint(op string, d time.Duration, err error)
}

// Nop observes nothing: the zero value of every hook.
type Nop struct{}

var (
	_ Observer    = Nop{}
	_ Platform    = Nop{}
	_ Checkpoints = Nop{}
)

func (Nop) TurnEnded(Turn)                                  {}
func (Nop) FirstEvent(string, string, Start, time.Duration) {}
func (Nop) ToolCall(string, string)                         {}
func (Nop) Approval(string, string)                         {}
func (Nop) PlatformCall(string, error)                      {}
func (Nop) Checkpoint(string, time.Duration, error)         {}

// State is read when metrics are scraped, for the gauges.
type State interface {
	// InFlight is the number of turns running now.
	InFlight() int
	// Pools describes each provider's warm pool.
	Pools() []Pool
	// Sandboxes counts the sandboxes the store records as not destroyed,
	// by provider and state.
	Sandboxes() ([]SandboxCount, error)
}

// PrewarmState is a State that also keeps pre-warmed slots.
type PrewarmState interface {
	PrewarmShapes() []PrewarmShape
}

// PrewarmShape is one shape of pre-warmed slots: gauges and, for Hits
// and Misses (by reason, a closed list), counters since start.
type PrewarmShape struct {
	Harness, Provider         string
	Ready, Claimed, Refilling int
	Hits                      int64
	Misses                    map[string]int64
}

// Pool is one provider's warm pool.
type Pool struct {
	Provider string
	Warm     int // sessions kept warm now, each with its sandbox
	Awaiting int // of which parked waiting for approval
	Capacity int // most it keeps
}

// SandboxCount is how many sandboxes a provider has in a state.
type SandboxCount struct {
	Provider, State string
	N               int
}
