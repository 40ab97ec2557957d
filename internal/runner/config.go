package runner

import (
	"log/slog"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/workspace"
)

// Config configures a Service.
type Config struct {
	Version         string
	DefaultProvider string
	// Harnesses is the launch table, by wire name.
	Harnesses map[string]agent.Spec
	// BaseEnv is added to every harness environment (PATH, LANG); it never
	// carries the runner's own secrets.
	BaseEnv         []string
	HistoryMaxChars int
	// TeardownTimeout bounds closing a session and destroying its sandbox.
	TeardownTimeout time.Duration
	// EventCommitDelay is how long a turn's events may wait in memory
	// before its event log starts committing (default 10 ms): a turn that
	// ends sooner is committed whole, in one transaction.
	EventCommitDelay time.Duration
	// WarmProbeIdle is how long a warm session may sit idle before its
	// sandbox is probed (sandbox.Prober) before reuse; zero means
	// DefaultWarmProbeIdle, negative never (fallback.go).
	WarmProbeIdle time.Duration

	// ReplicaID names this runner in the turn ledger and session leases;
	// it must survive restarts for crash recovery to find its turns.
	ReplicaID string
	// KeepAlive keeps harnesses warm between turns of a session.
	KeepAlive   bool
	PoolMax     int
	SessionTTL  time.Duration
	ApprovalTTL time.Duration
	// LeaseTTL is how long a running turn's session lease lasts between
	// renewals (renewed at a third of it).
	LeaseTTL time.Duration
	// PoolClock drives warm-session timers and approvals' TTL; nil is
	// the real clock.
	PoolClock pool.Clock
	// Pools overrides, per provider, whether and how long sessions stay
	// warm; a provider without an entry uses KeepAlive, PoolMax,
	// SessionTTL and ApprovalTTL.
	Pools map[string]PoolConfig
	// Prewarm keeps pre-started harnesses ready for new sessions
	// (prewarm.go); no shapes, none.
	Prewarm PrewarmConfig
	// Gateway, when set, keeps opaque_http model keys out of sandboxes
	// that share the runner's host: harnesses get placeholders.
	Gateway *gateway.Gateway
	// Egress is the refused-range policy (internal/sandbox/egress) a
	// request's model endpoint and allowlist entries are admitted by; nil
	// is the strict one, with nothing opened by the operator.
	Egress *egress.Policy
	// ModelForwardAddr is where, inside a remote sandbox, the forward to
	// the key gateway listens; default 127.0.0.1:47811.
	ModelForwardAddr string
	// Limits bound every turn; zero fields disable a limit.
	Limits Limits
	// Caps bound what a turn holds (caps.go); zero fields take defaults.
	Caps Caps
	// Tools serves customTools; its zero value refuses them.
	Tools ToolsConfig
	// Configure, if set, generates each harness's own configuration from
	// the request (installed command, config files, env, mode).
	Configure Configurer
	// Binds are host paths every sandbox sees at the same path: the
	// installed harnesses, which may lie in the data dir that isolated
	// sandboxes otherwise do not see.
	Binds []sandbox.Bind
	// Workdir, if set, is a host directory every harness works in instead
	// of a fresh workspace (`runner run -workdir`); only providers that
	// share the runner's filesystem can honour it.
	Workdir string
	// SecretRefusal, per provider, refuses requests whose credentials that
	// provider cannot keep out of its sandboxes, with this message naming
	// the setting to change. Empty: the provider may see them.
	SecretRefusal map[string]string
	// Workspaces, if set, keeps sessions' files and agents' folders in a
	// durable store (durable.go); CheckpointEvery is how often a running
	// turn checkpoints them (default 30s).
	Workspaces      workspace.Resolver
	CheckpointEvery time.Duration
	// Mounter, if set (AGENTA_RUNNER_WORKSPACE_MODE=fuse), mounts the
	// working directory from its store instead of restoring and
	// checkpointing it (durable_fuse.go).
	Mounter workspace.Mounter
	// DenyAllPermissions is the incident kill switch: every permission
	// request and tool call is denied.
	DenyAllPermissions bool
	// Observers follow every session turn (the platform mirror, traces).
	Observers []platform.Observer
	// OwnerClaimTimeout bounds the platform's answer to a cold turn's
	// owner claim (owner.go); default 2s.
	OwnerClaimTimeout time.Duration

	// Metrics is told of turns, tool calls and approvals; nil observes
	// nothing.
	Metrics metrics.Observer

	Logger *slog.Logger
}

// PoolConfig is one provider's warm pool.
type PoolConfig struct {
	Enabled     bool
	Max         int
	IdleTTL     time.Duration
	ApprovalTTL time.Duration
}
