// Package sandbox defines where a harness runs: a Provider creates
// Sandboxes, a Sandbox starts Processes with stdio and holds files. The
// local provider (host process or bubblewrap) and the remote providers
// implement it; the runner only sees these interfaces. Implementations must
// be safe for concurrent use.
package sandbox

import (
	"context"
	"io"
	"strconv"
	"time"
)

// Provider creates sandboxes of one kind ("local", "daytona").
type Provider interface {
	// Name is the provider id used on the wire ("local", "daytona").
	Name() string
	// Create makes a new sandbox and returns once processes can start in it.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
}

// Opener is a Provider that can reattach to a sandbox it created earlier,
// for example after a runner restart. Open returns an error wrapping
// errdefs.ErrNotFound when the sandbox is gone.
type Opener interface {
	Open(ctx context.Context, id string, spec Spec) (Sandbox, error)
}

// Remover is a Provider whose sandboxes outlive the runner (remote
// machines) and can be deleted by id without being started first.
type Remover interface {
	Remove(ctx context.Context, id string) error
}

// Lister is a Provider that can enumerate the sandboxes this runner made
// (remote ones, labelled with its id), so that a reaper can delete those
// no session owns; with Remover it is what the periodic reaper needs.
// Sandboxes already being deleted are left out.
type Lister interface {
	ListIDs(ctx context.Context) ([]string, error)
}

// StateRemover is a Provider that can delete the durable state kept under
// a Spec.StateKey, when its session is deleted.
type StateRemover interface {
	RemoveState(ctx context.Context, key string) error
}

// Binder is a Provider whose sandboxes share the runner's filesystem and
// honour Spec.Binds. Other providers refuse binds.
type Binder interface {
	CanBind() bool
}

// Channeler is a Sandbox whose processes reach the runner through the
// provider's own connection (remote sandboxes, where no host socket can be
// bound in): a process started with ChannelEnv in its environment dials a
// named channel, and Accept returns that stream on the runner's side. The
// runner binary is available inside at RunnerPath, for `runner mcp-stdio`.
type Channeler interface {
	ChannelEnv() []string
	Accept(ctx context.Context, name string) (Process, error)
	RunnerPath() string
}

// Readier is a Provider that knows when it cannot serve a default turn
// on this host (a local provider whose isolated network, the default
// "on", cannot start): readiness reports it, naming the fix, so a load
// balancer sends such a replica no turns.
type Readier interface {
	Ready() error
}

// Describer reports what a provider enforces, for /health and for
// admission ("isolation": "bwrap" | "none" …).
type Describer interface {
	Describe() map[string]any
}

// HarnessImage is a Provider whose sandboxes come with the built-in
// harnesses installed in their image, one npm prefix per harness under
// HarnessPrefix(), instead of seeing the runner host's harness dir.
type HarnessImage interface {
	HarnessPrefix() string
}

// Sandbox is one isolated place to run a harness.
type Sandbox interface {
	// Info describes the sandbox; it never changes after Create.
	Info() Info
	// Start runs cmd inside the sandbox. Cancelling ctx kills the process.
	Start(ctx context.Context, cmd Cmd) (Process, error)
	// WriteFile writes data at path, an absolute path inside the sandbox
	// that must lie under Info().Workdir or Info().Home; parents are created.
	WriteFile(ctx context.Context, path string, data []byte, mode uint32) error
	// Destroy stops every process and frees everything the sandbox holds.
	// It is idempotent.
	Destroy(ctx context.Context) error
}

// Pauser is a Sandbox that can be parked (stopped, resumable) instead of
// destroyed.
type Pauser interface {
	Pause(ctx context.Context) error
}

// Info describes a sandbox.
type Info struct {
	ID        string
	Provider  string
	Workdir   string // the harness's working directory, inside the sandbox
	Home      string // a private writable $HOME, inside the sandbox
	Isolation string // what is enforced: "none", "bwrap", "daytona"
	// HostWorkdir is the working directory as seen from the runner's host,
	// when the provider shares a filesystem with it; empty otherwise.
	HostWorkdir string
	// AgentDir, if set, is the agent's shared folder; empty means beside
	// Workdir (see AgentDir).
	AgentDir string
}

// Spec is what a sandbox is created with.
type Spec struct {
	SessionID string
	ProjectID string
	// Network is the egress policy; the zero value is "on".
	Network Network
	// ReadOnly makes the workspace read-only for processes in the sandbox.
	ReadOnly bool
	// Binds are host paths made visible inside the sandbox at the same
	// path (read-only unless Writable), e.g. the runner binary for
	// `runner mcp-stdio` and the tool relay socket.
	Binds []Bind
	// Workdir, if set, is a host directory used as the workspace in place
	// of a fresh one, bound writable at its own path; the provider never
	// removes it. Only Binder providers honour it.
	Workdir string
	// StateKey, when set, names durable per-session state: the provider
	// keeps the workspace and $HOME under this key across sandboxes, so a
	// harness's native transcript outlives its process and sandbox, and
	// Destroy leaves them. Empty means everything is per sandbox.
	StateKey string
	// Labels are recorded with the sandbox (remote providers tag with them).
	Labels map[string]string
	// OnEvent, if set, receives provider notices during the sandbox's life,
	// such as a host blocked by the network allowlist (name "network.blocked").
	OnEvent func(name string, data map[string]any)
}

// Network is an egress policy.
type Network struct {
	Mode string // "on" (default), "off", "allowlist"
	// Allow: hosts, *.domain patterns, CIDRs, host:port for "allowlist";
	// under "on", the model endpoint the harness dials itself. They come
	// from the request: a provider opens none of the refused ranges for
	// them (internal/sandbox/egress) unless the operator did.
	Allow []string
	// Runner are host:port addresses of the runner's own services the
	// sandbox is meant to reach (the key gateway on the host's loopback),
	// opened in every mode but "off" despite the refused ranges.
	Runner []string
}

// Bind is a host path made visible in the sandbox.
type Bind struct {
	Path     string
	Writable bool
}

// Cmd is a process to start in a sandbox.
type Cmd struct {
	Path string   // an absolute path, or a name looked up in the sandbox's PATH
	Args []string // argv after the program name
	Env  []string // the complete environment, KEY=VALUE; nothing is inherited
	Dir  string   // working directory; empty means Info().Workdir
	// WaitDelay bounds how long Wait waits for output after the process is
	// killed; zero means a provider default.
	WaitDelay time.Duration
}

// Process is a running process in a sandbox.
type Process interface {
	Stdin() io.WriteCloser
	Stdout() io.Reader
	// Wait waits for the process to exit. A non-zero exit is an *ExitError.
	Wait() error
	// Kill stops the process (and its children) now. Idempotent.
	Kill() error
	// StderrTail returns the last few KiB the process wrote to stderr.
	StderrTail() string
}

// ExitError reports a process that ended unsuccessfully.
type ExitError struct {
	Code   int    // exit code, or -1 when killed by a signal
	Signal string // the signal that killed it, if any
	Reason string // a limit the sandbox enforced ("out of memory", "too many processes"), if known
}

func (e *ExitError) Error() string {
	msg := "exited with code " + strconv.Itoa(e.Code)
	if e.Signal != "" {
		msg = "killed by " + e.Signal
	}
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg
}
