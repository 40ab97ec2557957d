// Package config reads the runner's configuration once, at boot, from the
// environment (AGENTA_RUNNER_*, AGENTA_AGENT_*, DAYTONA_*), validates all
// of it and reports every problem together. One table of settings
// (settings.go) drives loading, `runner serve --help` and the generated
// tables of docs/configuration.md and the README. No other package reads
// the environment.
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

// Config is the whole runner configuration, grouped by the component that
// reads it. Every field is loaded from one entry of the settings table
// (settings.go), which also documents it.
type Config struct {
	DataDir string
	// Workdir is `runner run -workdir`, never read from the environment:
	// a service must not hand its host's directories to callers.
	Workdir   string
	ReplicaID string
	LogLevel  string

	EnabledProviders []string
	DefaultProvider  string

	// Harnesses are the operator's launch commands
	// (AGENTA_RUNNER_HARNESS_<NAME>): each adds a harness or replaces a
	// built-in's command. The built-ins are internal/harness's.
	Harnesses  map[string]Harness
	HarnessDir string

	// KeyGateway keeps model keys out of local sandboxes (placeholders
	// swapped for keys by a runner-side proxy).
	KeyGateway bool

	HTTP      HTTP
	Limits    Limits
	Sessions  Sessions
	Prewarm   Prewarm
	Local     Local
	Store     Store
	Peers     Peers
	Workspace Workspace
	Tools     Tools
	// Platform is the Agenta platform mirror (platform.go).
	Platform   Platform
	Daytona    Daytona
	Kubernetes Kubernetes
	// Jobs configures /v1/jobs (jobs.go).
	Jobs Jobs
}

// Kubernetes configures the provider that runs each sandbox as a pod.
// The JSON settings (resources, placement) are Kubernetes API objects,
// decoded by cmd/runner with the provider's types.
type Kubernetes struct {
	Kubeconfig     string // empty: in-cluster
	Namespace      string
	Image          string
	RunnerPath     string
	HarnessPrefix  string // in the image
	RuntimeClass   string
	Resources      string // JSON ResourceRequirements
	NodeSelector   string // JSON object
	Tolerations    string // JSON list
	Affinity       string // JSON Affinity
	ClusterCIDRs   []string
	PendingTimeout time.Duration
	IdleTTL        time.Duration
	MaxWarm        int
	StorageClass   string // empty: no parking
	VolumeSize     string // a resource quantity
	// PolicyProbe: at boot, one probe pod tells whether NetworkPolicy is
	// enforced (off: only the API-group heuristic).
	PolicyProbe bool
}

// HTTP configures the service's listener, its callers and its connections.
type HTTP struct {
	Host  string
	Port  int
	Token string
	// ProjectTokens are per-project tokens (AGENTA_RUNNER_PROJECT_TOKENS),
	// by project: each is accepted only for requests naming its project.
	ProjectTokens    map[string]string
	ConcurrencyLimit int
	MaxBodyBytes     int64
	// MaxConnections caps the open connections, beyond which a request
	// gets 503 and only /health and /ready are served from a small
	// reserve; 0 is half the descriptor limit.
	MaxConnections int
	// IdleTimeout closes a keep-alive connection idle that long;
	// ReadTimeout is the longest a request body may stall, the deadline
	// moving with every read so a long upload in progress is not cut.
	IdleTimeout  time.Duration
	ReadTimeout  time.Duration
	PingInterval time.Duration
	// MetricsAddr, when set, serves /metrics there without the token;
	// otherwise /metrics is on the main port behind it.
	MetricsAddr     string
	ShutdownTimeout time.Duration
}

// Limits bound what one turn may take.
type Limits struct {
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
	// The run limits (runner.Limits); 0 disables one. Every other timer
	// must fire: 0 there keeps its default with a warning.
	RunTotalTimeout time.Duration
	RunIdleTimeout  time.Duration
	RunTTFBTimeout  time.Duration
	ToolCallTimeout time.Duration
}

// Sessions configures the warm pool and how a cold turn replays history.
type Sessions struct {
	KeepAlive       bool
	PoolMax         int
	TTL             time.Duration
	ApprovalTTL     time.Duration
	HistoryMaxChars int
}

// Local configures the local sandbox provider.
type Local struct {
	Isolation string
	MemoryMB  int
	Pids      int
	CPUs      float64
	Hide      []string
	UID       int
	GID       int
	Bwrap     string
	// DiskMB caps each local sandbox's workspace, $HOME and /tmp (0:
	// none); DiskReserveMB is the free space the sandboxes may never take
	// from the data dir's filesystem (0: none).
	DiskMB        int
	DiskReserveMB int
	// Network is how network "on" reaches out: "isolated" (slirp4netns
	// and nftables) or "host". NetworkAllow reopens refused destinations
	// (internal/sandbox/egress) for every dial made for a sandbox: network
	// "on", the allowlist proxy, the key gateway's upstream, model
	// endpoints.
	Network      string
	NetworkAllow []string
}

// Store configures the session store: SQLite in the data dir, or
// PostgreSQL.
type Store struct {
	DatabaseURL string
	// ConnectTimeout bounds opening a PostgreSQL connection and
	// StatementTimeout each store call on it (a client-side deadline,
	// since a stalled server answers no server-side timeout; it is sent as
	// statement_timeout too).
	ConnectTimeout   time.Duration
	StatementTimeout time.Duration
	// ProbeInterval is how often the store is probed with a write for
	// readiness (sooner, with a backoff, after a failed write); 0: never,
	// and readiness ignores the store.
	ProbeInterval time.Duration
}

// Workspace configures durable workspaces.
type Workspace struct {
	// StoreURL is the durable workspace store: empty for a directory in
	// the data dir, "off" for none.
	StoreURL string
	// PlatformMounts signs a platform request's workspace with the
	// platform's mount endpoints.
	PlatformMounts  bool
	CheckpointEvery time.Duration
	// Mode is how the working directory reaches the store: "sync"
	// (restore and checkpoints, the default) or "fuse" (an rclone mount,
	// only when set).
	Mode string
}

// Tools configures the tools a turn serves.
type Tools struct {
	// Timeout is one tool callback's, when its spec names none.
	Timeout          time.Duration
	MCPHostAllowlist []string
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

// Harness is one AGENTA_RUNNER_HARNESS_<NAME> entry.
type Harness struct {
	Name    string
	Command []string
}

// KnownProviders are the sandbox providers this build knows.
var knownProviders = []string{"local", "daytona", "kubernetes"}

// Load reads the configuration from environ: every entry of the settings
// table in order, then the checks that span settings. It returns every
// validation problem joined, and warnings for values that fell back to
// defaults.
func Load(environ []string) (Config, []string, error) {
	l := newLoader(environ)
	var c Config
	for i := range settings {
		if s := &settings[i]; s.load != nil {
			s.load(l, s, &c)
		}
	}
	checkDaytona(l, &c)
	checkKubernetes(l, &c)
	return c, l.warnings, errors.Join(l.errs...)
}

// loadProviders reads AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS: a comma
// list of known providers, each once; unset is local.
func loadProviders(l *loader, s *Setting, c *Config) {
	enabled := l.str(s.Name, "")
	if l.isSet(s.Name) && enabled == "" {
		l.fail(s.Name + " is set but empty; list providers, e.g. local,daytona")
	}
	if enabled == "" {
		enabled = s.Default
	}
	seen := map[string]bool{}
	for _, p := range strings.Split(enabled, ",") {
		p = strings.ToLower(strings.TrimSpace(p))
		switch {
		case p == "":
			l.fail(s.Name + " has an empty entry")
		case !contains(knownProviders, p):
			l.fail(fmt.Sprintf("%s: unknown provider %q (known: %s)", s.Name, p, strings.Join(knownProviders, ", ")))
		case seen[p]:
			l.fail(fmt.Sprintf("%s lists %q twice", s.Name, p))
		default:
			seen[p] = true
			c.EnabledProviders = append(c.EnabledProviders, p)
		}
	}
}

// loadDefaultProvider reads the provider for requests naming none: local,
// or the first enabled one when local is not; it must be enabled.
func loadDefaultProvider(l *loader, s *Setting, c *Config) {
	def := strings.ToLower(l.first(s.names()...))
	if def == "" {
		def = "local"
		if len(c.EnabledProviders) > 0 && !contains(c.EnabledProviders, "local") {
			def = c.EnabledProviders[0]
		}
	}
	if !contains(c.EnabledProviders, def) {
		l.fail(fmt.Sprintf("%s %q is not an enabled provider (enabled: %s)", s.Name, def, strings.Join(c.EnabledProviders, ", ")))
	}
	c.DefaultProvider = def
}

// checkDaytona checks the Daytona settings against each other, once all
// are read.
func checkDaytona(l *loader, c *Config) {
	// The reaper deletes an unrecorded sandbox on its second sighting, one
	// interval apart; a shorter interval than a create takes would delete
	// sandboxes still being created.
	if c.Daytona.ReapInterval > 0 && c.Daytona.ReapInterval < time.Minute {
		l.warn(fmt.Sprintf("AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS (%s) is below one minute, shorter than a sandbox create may take; using 60000", c.Daytona.ReapInterval))
		c.Daytona.ReapInterval = time.Minute
	}
	if !contains(c.EnabledProviders, "daytona") {
		return
	}
	if c.Daytona.APIKey == "" {
		l.fail("daytona is enabled but DAYTONA_API_KEY (or AGENTA_RUNNER_DAYTONA_API_KEY) is not set")
	}
	if c.Daytona.Snapshot != "" && c.Daytona.Image != "" {
		l.fail("DAYTONA_SNAPSHOT and DAYTONA_IMAGE are mutually exclusive; set one")
	}
	if c.Daytona.Snapshot == "" && c.Daytona.Image == "" {
		c.Daytona.Snapshot = defaultDaytonaSnapshot
	}
	if c.Daytona.IdleTTL >= time.Duration(c.Daytona.AutoStopMinutes)*time.Minute {
		l.warn(fmt.Sprintf("AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS (%s) is not below DAYTONA_AUTOSTOP (%d min): Daytona may stop sandboxes the pool believes warm", c.Daytona.IdleTTL, c.Daytona.AutoStopMinutes))
	}
}

// checkKubernetes checks that an enabled kubernetes provider knows where
// its pods go and what they run.
func checkKubernetes(l *loader, c *Config) {
	if !contains(c.EnabledProviders, "kubernetes") {
		return
	}
	if c.Kubernetes.Namespace == "" {
		l.fail("kubernetes is enabled but AGENTA_RUNNER_KUBERNETES_NAMESPACE (where sandbox pods go) is not set")
	}
	if c.Kubernetes.Image == "" {
		l.fail("kubernetes is enabled but AGENTA_RUNNER_KUBERNETES_IMAGE (the sandbox image, with the runner and the harnesses) is not set")
	}
}

// defaultDaytonaSnapshot is the snapshot Daytona sandboxes start from when
// neither DAYTONA_SNAPSHOT nor DAYTONA_IMAGE is set.
const defaultDaytonaSnapshot = "agentrunner-sandbox-v1"

// DefaultLocalCPUs is AGENTA_RUNNER_LOCAL_CPUS unset: half the host's
// CPUs, at least one, so one sandbox never has every core.
func DefaultLocalCPUs() float64 { return max(1, float64(runtime.NumCPU())/2) }

// RequireServe checks what only `runner serve` needs.
func (c Config) RequireServe() error {
	if strings.TrimSpace(c.HTTP.Token) == "" {
		return errors.New("AGENTA_RUNNER_TOKEN is required. Generate a secret, e.g. `export AGENTA_RUNNER_TOKEN=$(openssl rand -hex 32)`, and give the same value to the platform that calls this runner")
	}
	if len(c.HTTP.Token) < 16 {
		return errors.New("AGENTA_RUNNER_TOKEN is too short (under 16 characters); generate one with `openssl rand -hex 32`")
	}
	return nil
}

// Addr is the listen address.
func (c Config) Addr() string { return c.HTTP.Host + ":" + strconv.Itoa(c.HTTP.Port) }

// Summary is a one-line, redacted description for the boot log.
func (c Config) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen=%s providers=%s default=%s isolation=%s data_dir=%s store=%s keepalive=%v pool_max=%d harness_overrides=%s token=%s",
		c.Addr(), strings.Join(c.EnabledProviders, ","), c.DefaultProvider, c.Local.Isolation, c.DataDir, c.storeKind(), c.Sessions.KeepAlive, c.Sessions.PoolMax,
		strings.Join(c.HarnessOverrides(), ","), redact(c.HTTP.Token))
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
	if c.Store.DatabaseURL != "" {
		return "postgres"
	}
	return "sqlite"
}

// HarnessOverrides lists the names of the operator's launch commands,
// sorted.
func (c Config) HarnessOverrides() []string {
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
