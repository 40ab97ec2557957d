// Package config reads the runner's configuration once, at boot, from the
// environment (AGENTA_RUNNER_*, AGENTA_AGENT_*, DAYTONA_*), validates all
// of it and reports every problem together. No other package reads the
// environment.
package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the whole runner configuration.
type Config struct {
	Host  string
	Port  int
	Token string
	// ProjectTokens are per-project tokens (AGENTA_RUNNER_PROJECT_TOKENS),
	// by project: each is accepted only for requests naming its project.
	ProjectTokens    map[string]string
	ConcurrencyLimit int
	MaxBodyBytes     int64
	// MaxEventBytes caps one JSON-RPC line from a harness; MaxOutputBytes
	// the assistant text a turn keeps (truncated past it, with a marker);
	// MaxResultBytes the events a JSON result holds and MaxTurnLogBytes
	// the harness's events one turn writes to the session log (the turn
	// fails past any of these three).
	MaxEventBytes   int
	MaxOutputBytes  int
	MaxResultBytes  int
	MaxTurnLogBytes int
	// HistoryCacheBytes bounds the decoded histories kept between turns
	// (0: none).
	HistoryCacheBytes int
	DataDir           string
	// Workdir is `runner run -workdir`, never read from the environment:
	// a service must not hand its host's directories to callers.
	Workdir   string
	ReplicaID string
	LogLevel  string

	EnabledProviders []string
	DefaultProvider  string

	// Harnesses is the launch table: built-ins plus AGENTA_RUNNER_HARNESS_<NAME>.
	Harnesses  map[string]Harness
	HarnessDir string

	LocalIsolation string
	LocalMemoryMB  int
	LocalPids      int
	LocalCPUs      float64
	LocalHide      []string
	LocalUID       int
	LocalGID       int
	LocalBwrap     string
	// LocalDiskMB caps each local sandbox's workspace, $HOME and /tmp
	// (AGENTA_RUNNER_LOCAL_DISK_MB, 0: none); DiskReserveMB is the free
	// space the sandboxes may never take from the data dir's filesystem
	// (AGENTA_RUNNER_DISK_RESERVE_MB, 0: none).
	LocalDiskMB   int
	DiskReserveMB int

	// LocalNetwork is how network "on" reaches out: "isolated" (slirp4netns
	// and nftables) or "host". LocalNetworkAllow reopens refused
	// destinations (internal/sandbox/egress) for every dial made for a
	// sandbox: network "on", the allowlist proxy, the key gateway's
	// upstream, model endpoints.
	LocalNetwork      string
	LocalNetworkAllow []string

	DatabaseURL string
	// DatabaseConnectTimeout bounds opening a PostgreSQL connection and
	// DatabaseStatementTimeout each store call on it (a client-side
	// deadline, since a stalled server answers no server-side timeout; it
	// is sent as statement_timeout too).
	DatabaseConnectTimeout   time.Duration
	DatabaseStatementTimeout time.Duration
	// StoreProbeInterval is how often the store is probed with a write
	// for readiness (sooner, with a backoff, after a failed write); 0:
	// never, and readiness ignores the store.
	StoreProbeInterval time.Duration
	// StoreURL is the durable workspace store (AGENTA_RUNNER_STORE_URL):
	// empty for a directory in the data dir, "off" for none.
	StoreURL        string
	CheckpointEvery time.Duration
	// WorkspaceMode is how the working directory reaches the store
	// (AGENTA_RUNNER_WORKSPACE_MODE): "sync" (restore and checkpoints, the
	// default) or "fuse" (an rclone mount, only when set).
	WorkspaceMode string
	// PlatformMounts signs a platform request's workspace with the
	// platform's mount endpoints (AGENTA_RUNNER_PLATFORM_MOUNTS).
	PlatformMounts bool
	// Platform is the Agenta platform mirror (platform.go).
	Platform Platform
	// KeyGateway keeps model keys out of local sandboxes (placeholders
	// swapped for keys by a runner-side proxy).
	KeyGateway bool

	KeepAlive       bool
	PoolMax         int
	SessionTTL      time.Duration
	ApprovalTTL     time.Duration
	HistoryMaxChars int
	// The run limits (runner.Limits); 0 disables one. Every other timer
	// must fire: 0 there keeps its default with a warning.
	RunTotalTimeout  time.Duration
	RunIdleTimeout   time.Duration
	RunTTFBTimeout   time.Duration
	ToolCallTimeout  time.Duration
	ToolsTimeout     time.Duration
	MCPHostAllowlist []string
	ShutdownTimeout  time.Duration
	PingInterval     time.Duration
	// The HTTP server's connections: IdleTimeout closes a keep-alive
	// connection idle that long (AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS);
	// ReadTimeout is the longest a request body may stall, the deadline
	// moving with every read so a long upload in progress is not cut
	// (AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS); MaxConnections caps the open
	// connections, beyond which a request gets 503 and only /health and
	// /ready are served from a small reserve (AGENTA_RUNNER_MAX_CONNECTIONS;
	// 0, the default, is half the descriptor limit).
	IdleTimeout    time.Duration
	ReadTimeout    time.Duration
	MaxConnections int
	// MetricsAddr, when set, serves /metrics there without the token;
	// otherwise /metrics is on the main port behind it.
	MetricsAddr string

	Daytona Daytona
}

// Daytona configures the remote provider.
type Daytona struct {
	APIKey            string
	APIURL            string
	Target            string
	Snapshot          string
	Image             string
	AutoStopMinutes   int
	AutoDeleteMinutes int
	IdleTTL           time.Duration
	MaxWarm           int
	OpaqueSecrets     bool
	// ReapInterval is how often the runner deletes the Daytona sandboxes
	// it made that no session owns; 0 disables the periodic reaper.
	ReapInterval time.Duration
}

// Harness is one launch-table entry.
type Harness struct {
	Name    string
	Command []string
	// Custom is true when the command came from AGENTA_RUNNER_HARNESS_<NAME>.
	Custom bool
}

// KnownProviders are the sandbox providers this build knows.
var knownProviders = []string{"local", "daytona"}

// Load reads the configuration from getenv. It returns every validation
// problem joined, and warnings for values that fell back to defaults.
func Load(environ []string) (Config, []string, error) {
	l := newLoader(environ)
	getenv := l.get
	c := Config{
		Host:              l.str("AGENTA_RUNNER_HOST", "127.0.0.1"),
		Port:              l.strictInt("AGENTA_RUNNER_PORT", 8765, 1, 65535),
		Token:             l.str("AGENTA_RUNNER_TOKEN", ""),
		ConcurrencyLimit:  l.strictInt("AGENTA_RUNNER_CONCURRENCY_LIMIT", 1000, 1, 1<<30),
		MaxBodyBytes:      int64(l.strictInt("AGENTA_RUNNER_MAX_BODY_BYTES", 32<<20, 1024, 1<<31-1)),
		MaxEventBytes:     l.strictInt("AGENTA_RUNNER_MAX_EVENT_BYTES", 8<<20, 64<<10, 1<<30),
		MaxOutputBytes:    l.strictInt("AGENTA_RUNNER_MAX_OUTPUT_BYTES", 4<<20, 1024, 1<<30),
		MaxResultBytes:    l.strictInt("AGENTA_RUNNER_MAX_RESULT_BYTES", 16<<20, 64<<10, 1<<30),
		MaxTurnLogBytes:   l.strictInt("AGENTA_RUNNER_MAX_TURN_LOG_BYTES", 64<<20, 64<<10, 1<<31-1),
		HistoryCacheBytes: l.strictInt("AGENTA_RUNNER_HISTORY_CACHE_BYTES", 16<<20, 0, 1<<31-1),
		DataDir:           l.str("AGENTA_RUNNER_DATA_DIR", defaultDataDir(getenv)),
		ReplicaID:         l.str("AGENTA_RUNNER_REPLICA_ID", ""),
		LogLevel:          strings.ToLower(l.str("AGENTA_RUNNER_LOG_LEVEL", "info")),
		LocalIsolation:    strings.ToLower(l.str("AGENTA_RUNNER_LOCAL_ISOLATION", "bwrap")),
		LocalMemoryMB:     l.limit("AGENTA_RUNNER_LOCAL_MEMORY_MB", 4096, 16),
		LocalPids:         l.limit("AGENTA_RUNNER_LOCAL_PIDS", 1024, 8),
		LocalCPUs:         l.float("AGENTA_RUNNER_LOCAL_CPUS", DefaultLocalCPUs()),
		LocalHide:         l.paths("AGENTA_RUNNER_LOCAL_HIDE"),
		LocalUID:          l.strictInt("AGENTA_RUNNER_LOCAL_SANDBOX_UID", 0, 0, 1<<31-1),
		LocalGID:          l.strictInt("AGENTA_RUNNER_LOCAL_SANDBOX_GID", 0, 0, 1<<31-1),
		LocalBwrap:        l.str("AGENTA_RUNNER_LOCAL_BWRAP", ""),
		LocalDiskMB:       l.limit("AGENTA_RUNNER_LOCAL_DISK_MB", 4096, 16),
		DiskReserveMB:     l.strictInt("AGENTA_RUNNER_DISK_RESERVE_MB", 512, 0, 1<<30),
		DatabaseURL:       l.str("AGENTA_RUNNER_DATABASE_URL", ""),
		StoreURL:          l.str("AGENTA_RUNNER_STORE_URL", ""),
		CheckpointEvery:   l.ms("AGENTA_RUNNER_WORKSPACE_CHECKPOINT_MS", 30_000),
		PlatformMounts:    l.boolean("AGENTA_RUNNER_PLATFORM_MOUNTS", false),
		KeyGateway:        l.boolean("AGENTA_RUNNER_KEY_GATEWAY", true),
		KeepAlive:         l.boolean("AGENTA_RUNNER_SESSION_KEEPALIVE", true),
		PoolMax:           l.lenientInt("AGENTA_RUNNER_SESSION_POOL_MAX", 8),
		SessionTTL:        l.ms("AGENTA_RUNNER_SESSION_TTL_MS", 60_000),
		ApprovalTTL:       l.ms("AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS", 600_000),
		HistoryMaxChars:   l.lenientInt("AGENTA_AGENT_HISTORY_MAX_CHARS", 100_000),
		RunTotalTimeout:   l.msOff("AGENTA_RUNNER_RUN_TOTAL_TIMEOUT_MS", 39_600_000),
		RunIdleTimeout:    l.msOff("AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS", 1_800_000),
		RunTTFBTimeout:    l.msOff("AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS", 120_000),
		ToolCallTimeout:   l.ms("AGENTA_RUNNER_TOOL_CALL_TIMEOUT_MS", 1_800_000),
		ToolsTimeout:      l.ms("AGENTA_AGENT_TOOLS_TIMEOUT", 30_000),
		MCPHostAllowlist:  l.list("AGENTA_AGENT_MCPS_HOST_ALLOWLIST"),
		ShutdownTimeout:   l.ms("AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS", 10_000),
		PingInterval:      l.ms("AGENTA_RUNNER_STREAM_PING_MS", 15_000),
		MetricsAddr:       l.listenAddr("AGENTA_RUNNER_METRICS_ADDR"),
		IdleTimeout:       l.ms("AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS", 120_000),
		ReadTimeout:       l.ms("AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS", 30_000),
		MaxConnections:    l.strictInt("AGENTA_RUNNER_MAX_CONNECTIONS", 0, 0, 1<<30),
	}
	c.HarnessDir = l.str("AGENTA_RUNNER_HARNESS_DIR", filepath.Join(c.DataDir, "harnesses"))
	c.DatabaseConnectTimeout = l.ms("AGENTA_RUNNER_DATABASE_CONNECT_TIMEOUT_MS", 5_000)
	c.DatabaseStatementTimeout = l.ms("AGENTA_RUNNER_DATABASE_STATEMENT_TIMEOUT_MS", 10_000)
	c.StoreProbeInterval = l.msOff("AGENTA_RUNNER_STORE_PROBE_INTERVAL_MS", 5_000)
	c.Platform = loadPlatform(l)

	// Providers.
	enabled := l.str("AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS", "")
	if l.isSet("AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS") && enabled == "" {
		l.fail("AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS is set but empty; list providers, e.g. local,daytona")
	}
	if enabled == "" {
		enabled = "local"
	}
	seen := map[string]bool{}
	for _, p := range strings.Split(enabled, ",") {
		p = strings.ToLower(strings.TrimSpace(p))
		switch {
		case p == "":
			l.fail("AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS has an empty entry")
		case !contains(knownProviders, p):
			l.fail(fmt.Sprintf("AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS: unknown provider %q (known: %s)", p, strings.Join(knownProviders, ", ")))
		case seen[p]:
			l.fail(fmt.Sprintf("AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS lists %q twice", p))
		default:
			seen[p] = true
			c.EnabledProviders = append(c.EnabledProviders, p)
		}
	}
	def := strings.ToLower(l.str("AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER", l.str("SANDBOX_AGENT_PROVIDER", "")))
	if def == "" {
		def = "local"
		if len(c.EnabledProviders) > 0 && !seen["local"] {
			def = c.EnabledProviders[0]
		}
	}
	if !seen[def] {
		l.fail(fmt.Sprintf("AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER %q is not an enabled provider (enabled: %s)", def, strings.Join(c.EnabledProviders, ", ")))
	}
	c.DefaultProvider = def

	switch c.LocalIsolation {
	case "bwrap", "none":
	default:
		l.fail(fmt.Sprintf("AGENTA_RUNNER_LOCAL_ISOLATION %q: use bwrap or none", c.LocalIsolation))
	}
	c.WorkspaceMode = strings.ToLower(l.str("AGENTA_RUNNER_WORKSPACE_MODE", "sync"))
	switch c.WorkspaceMode {
	case "sync", "fuse":
	default:
		l.fail(fmt.Sprintf("AGENTA_RUNNER_WORKSPACE_MODE %q: use sync (restore and checkpoint, the default) or fuse (an rclone mount)", c.WorkspaceMode))
	}
	c.LocalNetwork = strings.ToLower(l.str("AGENTA_RUNNER_LOCAL_NETWORK", "isolated"))
	c.LocalNetworkAllow = l.list("AGENTA_RUNNER_LOCAL_NETWORK_ALLOW")
	switch c.LocalNetwork {
	case "isolated", "host":
	default:
		l.fail(fmt.Sprintf("AGENTA_RUNNER_LOCAL_NETWORK %q: use isolated or host", c.LocalNetwork))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error", "silent":
	default:
		l.fail(fmt.Sprintf("AGENTA_RUNNER_LOG_LEVEL %q: use debug, info, warn, error or silent", c.LogLevel))
	}
	if c.LocalCPUs < 0 {
		l.fail("AGENTA_RUNNER_LOCAL_CPUS must be a positive number, or 0 for no limit")
	}

	// Daytona: both documented spellings.
	c.Daytona = Daytona{
		APIKey:            l.first("AGENTA_RUNNER_DAYTONA_API_KEY", "DAYTONA_API_KEY"),
		APIURL:            l.first("AGENTA_RUNNER_DAYTONA_API_URL", "DAYTONA_API_URL"),
		Target:            l.first("AGENTA_RUNNER_DAYTONA_TARGET", "DAYTONA_TARGET"),
		Snapshot:          l.first("AGENTA_RUNNER_DAYTONA_SNAPSHOT", "DAYTONA_SNAPSHOT"),
		Image:             l.first("AGENTA_RUNNER_DAYTONA_IMAGE", "DAYTONA_IMAGE"),
		AutoStopMinutes:   l.firstInt(15, "AGENTA_RUNNER_DAYTONA_AUTOSTOP_MINUTES", "DAYTONA_AUTOSTOP"),
		AutoDeleteMinutes: l.firstInt(30, "AGENTA_RUNNER_DAYTONA_AUTODELETE_MINUTES", "DAYTONA_AUTODELETE"),
		IdleTTL:           l.msOff("AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS", 120_000),
		MaxWarm:           l.lenientInt("AGENTA_RUNNER_DAYTONA_SESSION_MAX_WARM", 20),
		OpaqueSecrets:     opaque(l.str("AGENTA_RUNNER_DAYTONA_OPAQUE_SECRETS", "")),
		ReapInterval:      l.msOff("AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS", 600_000),
	}
	// The reaper deletes an unrecorded sandbox on its second sighting, one
	// interval apart; a shorter interval than a create takes would delete
	// sandboxes still being created.
	if c.Daytona.ReapInterval > 0 && c.Daytona.ReapInterval < time.Minute {
		l.warn(fmt.Sprintf("AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS (%s) is below one minute, shorter than a sandbox create may take; using 60000", c.Daytona.ReapInterval))
		c.Daytona.ReapInterval = time.Minute
	}
	if seen["daytona"] {
		if c.Daytona.APIKey == "" {
			l.fail("daytona is enabled but DAYTONA_API_KEY (or AGENTA_RUNNER_DAYTONA_API_KEY) is not set")
		}
		if c.Daytona.Snapshot != "" && c.Daytona.Image != "" {
			l.fail("DAYTONA_SNAPSHOT and DAYTONA_IMAGE are mutually exclusive; set one")
		}
		if c.Daytona.Snapshot == "" && c.Daytona.Image == "" {
			c.Daytona.Snapshot = "agentrunner-sandbox-v1"
		}
		if c.Daytona.IdleTTL >= time.Duration(c.Daytona.AutoStopMinutes)*time.Minute {
			l.warn(fmt.Sprintf("AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS (%s) is not below DAYTONA_AUTOSTOP (%d min): Daytona may stop sandboxes the pool believes warm", c.Daytona.IdleTTL, c.Daytona.AutoStopMinutes))
		}
	}

	c.Harnesses = harnesses(environ, l)
	c.ProjectTokens = projectTokens(l, c.Token)
	return c, l.warnings, errors.Join(l.errs...)
}

// DefaultLocalCPUs is AGENTA_RUNNER_LOCAL_CPUS unset: half the host's
// CPUs, at least one, so one sandbox never has every core.
func DefaultLocalCPUs() float64 { return max(1, float64(runtime.NumCPU())/2) }

// RequireServe checks what only `runner serve` needs.
func (c Config) RequireServe() error {
	if strings.TrimSpace(c.Token) == "" {
		return errors.New("AGENTA_RUNNER_TOKEN is required. Generate a secret, e.g. `export AGENTA_RUNNER_TOKEN=$(openssl rand -hex 32)`, and give the same value to the platform that calls this runner")
	}
	if len(c.Token) < 16 {
		return errors.New("AGENTA_RUNNER_TOKEN is too short (under 16 characters); generate one with `openssl rand -hex 32`")
	}
	return nil
}

// Addr is the listen address.
func (c Config) Addr() string { return c.Host + ":" + strconv.Itoa(c.Port) }

// Summary is a one-line, redacted description for the boot log.
func (c Config) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen=%s providers=%s default=%s isolation=%s data_dir=%s store=%s keepalive=%v pool_max=%d harnesses=%s token=%s",
		c.Addr(), strings.Join(c.EnabledProviders, ","), c.DefaultProvider, c.LocalIsolation, c.DataDir, c.storeKind(), c.KeepAlive, c.PoolMax,
		strings.Join(c.HarnessNames(), ","), redact(c.Token))
	if contains(c.EnabledProviders, "daytona") {
		artifact := "snapshot:" + c.Daytona.Snapshot
		if c.Daytona.Image != "" {
			artifact = "image:" + c.Daytona.Image
		}
		target := c.Daytona.Target
		if target == "" {
			target = "default"
		}
		fmt.Fprintf(&b, " daytona_target=%s daytona_artifact=%s daytona_key=%s", target, artifact, redact(c.Daytona.APIKey))
	}
	return b.String()
}

func (c Config) storeKind() string {
	if c.DatabaseURL != "" {
		return "postgres"
	}
	return "sqlite"
}

// HarnessNames lists the launch table, sorted.
func (c Config) HarnessNames() []string {
	names := make([]string, 0, len(c.Harnesses))
	for n := range c.Harnesses {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func redact(s string) string {
	if s == "" {
		return "unset"
	}
	return "set(" + strconv.Itoa(len(s)) + " chars)"
}

func defaultDataDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "runner")
	}
	if h := getenv("HOME"); h != "" && h != "/" {
		return filepath.Join(h, ".local", "state", "runner")
	}
	return "/var/lib/runner"
}

func opaque(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "0", "no", "disabled", "plaintext":
		return false
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
