// Package agent defines a harness session as the runner drives it: a
// Driver opens a Session on a harness process in a sandbox, and a Session
// runs prompts, streaming wire events to a sink. The launch table (Spec)
// is data. Package agent/acp implements Driver over the Agent Client
// Protocol; agent/agenttest is a scripted fake ACP agent for tests.
package agent

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// Driver starts a harness in a sandbox and opens a session on it.
type Driver interface {
	// Open starts the harness process in sb and opens a session: a new one,
	// or, when opts.LoadSessionID is set and the harness can load, the
	// native transcript of that session. Cancelling ctx aborts the open.
	Open(ctx context.Context, sb sandbox.Sandbox, opts Options) (Session, error)
}

// Session is one live harness session.
type Session interface {
	// ID is the harness's own session id.
	ID() string
	// Info describes the harness behind the session.
	Info() Info
	// Prompt sends one user turn and streams its events to sink, in order,
	// until the turn ends. It returns early with StopPaused when the
	// permission handler parks a request; the turn then continues with
	// Resume. Cancelling ctx sends session/cancel, answers pending
	// permission requests "cancelled" and returns after the harness ends
	// the turn (StopCancelled), or after a grace period kills it.
	Prompt(ctx context.Context, blocks []json.RawMessage, sink Sink) (Outcome, error)
	// Resume answers parked permission requests and continues the paused
	// turn, streaming into sink, with Prompt's contract.
	Resume(ctx context.Context, decisions map[string]Decision, sink Sink) (Outcome, error)
	// Close ends the session and its process. Idempotent.
	Close(ctx context.Context) error
}

// Rebinder is a Session whose model and mode can be changed after it
// opened: how a session started before its tenant was known (a
// pre-warmed slot) is bound to the tenant's choice. Each call blocks
// until the harness answered; an error leaves the session as it was.
type Rebinder interface {
	SetModel(ctx context.Context, model string) error
	SetMode(ctx context.Context, mode string) error
}

// Sink receives a turn's events as they happen.
type Sink func(wire.Event)

// Stop reasons beyond ACP's own (end_turn, max_tokens, max_turn_requests,
// refusal, cancelled).
const (
	StopEndTurn   = "end_turn"
	StopCancelled = "cancelled"
	StopPaused    = "paused"
)

// Outcome is how a prompt ended.
type Outcome struct {
	StopReason string
	Usage      *wire.Usage
	// Parked lists the permission requests left waiting when StopReason is
	// StopPaused.
	Parked []PermissionRequest
}

// Info describes a harness process and its session.
type Info struct {
	Harness      string
	AgentName    string
	AgentVersion string
	Capabilities wire.Capabilities
	LoadSession  bool
	Loaded       bool // the session was reloaded with session/load
}

// Options configure Open.
type Options struct {
	Spec Spec
	// Env is the harness's complete environment.
	Env []string
	// Cwd is the session's working directory inside the sandbox.
	Cwd        string
	MCPServers []MCPServer
	// LoadSessionID asks for session/load of this harness session id.
	LoadSessionID string
	// Meta is sent as _meta on session/new and session/load.
	Meta map[string]any
	// Mode, if set, is applied with session/set_mode after the session opens.
	Mode string
	// Model, if set, is applied after the session opens when the harness
	// offers a model choice.
	Model string
	// Permission decides session/request_permission. Nil rejects every request.
	Permission PermissionFunc
	Logger     *slog.Logger
	// Gateway, if set and offered by the harness (an ACP auth method
	// "gateway"), is sent with authenticate before the session opens.
	Gateway *GatewayAuth
}

// GatewayAuth is ACP gateway authentication (claude-agent-acp's
// extension): the base URL and headers the harness calls its model with.
type GatewayAuth struct {
	BaseURL string
	Headers map[string]string
}

// MCPServer is an MCP server handed to the harness in session/new.
type MCPServer struct {
	Name    string
	Command string            // stdio: absolute path
	Args    []string          // stdio
	Env     map[string]string // stdio
	URL     string            // http
	Headers map[string]string // http
}

// PermissionFunc decides a permission request. It runs on the session's
// reader; a slow decision delays the harness, not the runner.
type PermissionFunc func(ctx context.Context, req PermissionRequest) Decision

// PermissionRequest is a harness asking to run a tool.
type PermissionRequest struct {
	ID         string // runner-side id of this request, unique within the session
	ToolCallID string
	Title      string
	ToolName   string
	Kind       string
	RawInput   json.RawMessage
	Options    []PermissionOption
}

// PermissionOption is one answer the harness offers.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"` // allow_once, allow_always, reject_once, reject_always
}

// Decision answers a permission request.
type Decision struct {
	Allow bool
	// Park leaves the request unanswered and pauses the turn.
	Park bool
	// Reason is recorded for denials ("policy", "user").
	Reason string
}

// Spec is one entry of the harness launch table.
type Spec struct {
	Name    string   // wire id: claude, codex, pi_core, …
	Command []string // argv; Command[0] is looked up in PATH when not absolute
	// Instructions is the file agentsMd is written to (CLAUDE.md, AGENTS.md).
	Instructions string
	// NoMCP marks a harness that does not take ACP mcpServers (Pi).
	NoMCP bool
	// NoPermissions marks a harness that never asks permission (Pi): a
	// policy that must stop its tools cannot be enforced on it.
	NoPermissions bool
	// LoadMeta builds the _meta session/load needs to resume a session id,
	// e.g. Claude's resume option. Nil sends none.
	LoadMeta func(sessionID string) map[string]any `json:"-"`
	// UnreliableLoad marks a harness whose session/load cannot be trusted;
	// the runner replays history instead.
	UnreliableLoad bool
	// StateDirs are the harness's own session and transcript directories,
	// relative to $HOME, kept in the durable workspace so a fresh sandbox
	// can session/load (credential files and SQLite databases excluded).
	StateDirs []string
	// KeyedDirs are directories under StateDirs whose entries are named
	// after the working directory (Claude's projects/<key>): a restore
	// into a sandbox with another working directory moves them to its
	// key, or the harness would not find its own transcript.
	KeyedDirs []KeyedDir `json:"-"`
}

// KeyedDir is a directory of a harness's state whose entries are named by
// Key of the working directory the harness ran in.
type KeyedDir struct {
	Dir string // relative to $HOME
	Key func(cwd string) string
	// FirstLine rewrites the first line of a moved file that names the
	// working directory, for a harness that refuses a transcript whose
	// recorded one is gone (Pi's session header); nil moves files as
	// they are. It returns line unchanged when it names no cwd.
	FirstLine func(line []byte, from, to string) []byte
	// Drop are files (relative to $HOME) that name the old paths and are
	// removed with a move: pi-acp's session map, whose stale file path
	// it would trust over finding the session itself.
	Drop []string
}

// ExitError reports a harness that died during a session.
type ExitError struct {
	Harness    string
	Err        error // the process's exit
	StderrTail string
}

func (e *ExitError) Error() string {
	msg := "harness " + e.Harness + " " + e.Err.Error()
	if e.StderrTail != "" {
		msg += ": " + e.StderrTail
	}
	return msg
}

func (e *ExitError) Unwrap() error { return e.Err }
