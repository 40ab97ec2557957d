package tools

import (
	"context"
	"encoding/json"
	"time"
)

// Defaults of Config (docs/contract.md, Tools).
const (
	DefaultTimeout          = 30 * time.Second
	DefaultTimeoutGrace     = 10 * time.Second
	DefaultMaxResultBytes   = 100_000
	DefaultMaxResponseBytes = 4 << 20
)

// Config configures a Set and CheckMCPServer. The zero value is usable:
// the MCP server guard is on, with an empty allowlist.
type Config struct {
	// DefaultTimeout bounds a call whose spec sets no timeoutMs.
	// Zero means DefaultTimeout (AGENTA_AGENT_TOOLS_TIMEOUT).
	DefaultTimeout time.Duration
	// TimeoutGrace is added to a spec's timeoutMs, so the gateway's own
	// deadline fires first and reports a meaningful error. Zero means
	// DefaultTimeoutGrace; negative means none.
	TimeoutGrace time.Duration
	// MaxResultBytes caps the text handed to the model; a longer result is
	// cut at a UTF-8 boundary and marked. Zero means DefaultMaxResultBytes.
	MaxResultBytes int
	// MaxResponseBytes caps the raw callback body read. Zero means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// HostAllowlist names user MCP server hosts exempt from
	// CheckMCPServer's https and address rules
	// (AGENTA_AGENT_MCPS_HOST_ALLOWLIST), compared case-insensitively,
	// any port. The tool callback needs no entry: it is trusted.
	HostAllowlist []string
	// Resolver resolves the callback's host when a call dials it, and MCP
	// server hosts in CheckMCPServer.
	// Nil means net.DefaultResolver.
	Resolver Resolver
	// RunKind, when set, is sent as x-agenta-run-kind. Empty means
	// RunContext's run.kind.
	RunKind string
	// RunContext is the request's runContext as JSON: the $ctx that
	// contextBindings and direct-call context bindings read.
	RunContext json.RawMessage
	// SessionID is the runner's session id, set as $ctx.session.id over
	// whatever RunContext says.
	SessionID string
	// Check, when set, runs before a call executes; an error refuses the
	// call and its text is what the model reads. The runner's permission
	// guard goes here (docs/contract.md, Tools).
	Check func(ctx context.Context, c Call) error
	// Client, when set, answers calls of kind "client" tools (fulfilled
	// by the caller's browser): the stored browser output, or an error
	// for the model after it parked the call.
	Client func(ctx context.Context, c Call) (string, error)
	// OnCall, when set, observes every finished call, for audit. It runs on
	// the call's goroutine and must not block.
	OnCall func(CallRecord)
}

// Call is one tool call as the harness made it.
type Call struct {
	Tool string // the spec's name
	// ID is the harness's tool call id when its MCP client sends one in
	// _meta, else one the Set generated.
	ID   string
	Args json.RawMessage // always a JSON object
}

// Outcome is how a call ended.
type Outcome string

// Outcomes of a call.
const (
	OutcomeOK        Outcome = "ok"
	OutcomeError     Outcome = "error"     // HTTP error, tool-reported error or unreadable response
	OutcomeTimeout   Outcome = "timeout"   // the per-call deadline passed
	OutcomeRefused   Outcome = "refused"   // Config.Check refused the call
	OutcomeInvalid   Outcome = "invalid"   // the arguments were not a JSON object
	OutcomeCancelled Outcome = "cancelled" // the MCP request or the turn was cancelled
)

// CallRecord describes a finished call.
type CallRecord struct {
	Call
	Start    time.Time
	Duration time.Duration
	Outcome  Outcome
	// Status is the callback's HTTP status, 0 when no response arrived.
	Status int
	// Truncated is true when the result was cut at MaxResultBytes.
	Truncated bool
	// Err is the error text the model read; empty on success.
	Err string
}

func (c Config) withDefaults() Config {
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.TimeoutGrace == 0 {
		c.TimeoutGrace = DefaultTimeoutGrace
	} else if c.TimeoutGrace < 0 {
		c.TimeoutGrace = 0
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return c
}
