package config

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Setting is one environment variable the runner documents: what it is,
// its default, which component reads it, and how it is loaded into a
// Config. The table below drives Load, `runner serve --help` and the
// generated tables of docs/configuration.md and the README, so a setting
// is added in one place: one entry here (see docs/configuration.md, "Adding
// a setting").
type Setting struct {
	// Name is the variable; Aliases are other spellings read after it
	// (before it with AliasFirst), documented beside it.
	Name       string
	Aliases    []string
	AliasFirst bool
	Component  Component
	// Type and Unit are what the value is (integer, milliseconds, bytes…).
	Type Type
	Unit string
	// Default is the value applied when the variable is unset, parsed by
	// the same code as a set value; DefaultDoc says it in words where it
	// is computed or has no literal form ("half the host's CPUs").
	Default    string
	DefaultDoc string
	Doc        string
	// Main marks the settings most deployments set: the README's table.
	Main bool
	// load reads the setting into c; nil for a variable read elsewhere
	// (set by the runner for its own children, or read by another
	// package), which is documented here all the same.
	load func(l *loader, s *Setting, c *Config)
}

// Component is the part of the runner a setting configures, and the
// Config group it lands in.
type Component string

// The components, in the order the reference lists them.
const (
	cService   Component = "Service"
	cHTTP      Component = "HTTP"
	cLimits    Component = "Limits"
	cSessions  Component = "Sessions"
	cLocal     Component = "Local sandboxes"
	cStore     Component = "Store"
	cReplicas  Component = "Replicas"
	cWorkspace Component = "Workspaces"
	cTools     Component = "Tools"
	cPlatform  Component = "Platform"
	cDaytona   Component = "Daytona"
	cJobs      Component = "Jobs"
	cKube      Component = "Kubernetes sandboxes"
	cCLI       Component = "Command line"
	cInternal  Component = "Internal"
)

// Components lists the components in documentation order.
var Components = []Component{cService, cHTTP, cLimits, cSessions, cLocal, cStore, cReplicas, cWorkspace, cTools, cPlatform, cDaytona, cKube, cJobs, cCLI, cInternal}

// Type is a setting's kind of value.
type Type string

// The types of value.
const (
	tString   Type = "string"
	tInt      Type = "integer"
	tFloat    Type = "number"
	tDuration Type = "milliseconds"
	tBool     Type = "on/off"
	tList     Type = "list"
	tEnum     Type = "one of"
	tURL      Type = "URL"
	tPath     Type = "path"
	tAddr     Type = "host:port"
)

// Settings returns the settings table, in load order.
func Settings() []Setting { return append([]Setting(nil), settings...) }

// names is the order the variable and its aliases are read in.
func (s *Setting) names() []string {
	if s.AliasFirst {
		return append(append([]string(nil), s.Aliases...), s.Name)
	}
	return append([]string{s.Name}, s.Aliases...)
}

// settings is the table, in load order: a setting whose default depends
// on another comes after it. Adding one: a line here, then `go generate
// ./internal/config` for the docs.
var settings = []Setting{
	{Name: "AGENTA_RUNNER_HOST", Component: cHTTP, Type: tString, Default: "127.0.0.1", Doc: "listen address", Main: true, load: text(func(c *Config) *string { return &c.HTTP.Host })},
	{Name: "AGENTA_RUNNER_PORT", Component: cHTTP, Type: tInt, Default: "8765", Doc: "listen port", Main: true, load: intIn(1, 65535, func(c *Config) *int { return &c.HTTP.Port })},
	{Name: "AGENTA_RUNNER_TOKEN", Component: cHTTP, Type: tString, DefaultDoc: "— (required for `serve`)", Doc: "shared secret callers present; at least 16 characters (`openssl rand -hex 32`)", Main: true, load: text(func(c *Config) *string { return &c.HTTP.Token })},
	{Name: "AGENTA_RUNNER_CONCURRENCY_LIMIT", Component: cHTTP, Type: tInt, Default: "1000", Doc: "in-flight turns before 429", load: intIn(1, 1<<30, func(c *Config) *int { return &c.HTTP.ConcurrencyLimit })},
	{Name: "AGENTA_RUNNER_MAX_BODY_BYTES", Component: cHTTP, Type: tInt, Unit: "bytes", Default: "33554432", DefaultDoc: "`33554432` (32 MiB)", Doc: "request body cap (413 above)", load: int64In(1024, 1<<31-1, func(c *Config) *int64 { return &c.HTTP.MaxBodyBytes })},
	{Name: "AGENTA_RUNNER_MAX_EVENT_BYTES", Component: cLimits, Type: tInt, Unit: "bytes", Default: "8388608", DefaultDoc: "`8388608` (8 MiB)", Doc: "one JSON-RPC line from a harness; a longer one ends the turn with an error naming this (the line is never read in part)", load: intIn(64<<10, 1<<30, func(c *Config) *int { return &c.Limits.MaxEventBytes })},
	{Name: "AGENTA_RUNNER_MAX_OUTPUT_BYTES", Component: cLimits, Type: tInt, Unit: "bytes", Default: "4194304", DefaultDoc: "`4194304` (4 MiB)", Doc: "assistant text a turn keeps (result `output` and `messages`, the session log's message, later turns' history); past it the text is cut and ends with `[runner: output truncated at N bytes; raise AGENTA_RUNNER_MAX_OUTPUT_BYTES]`, the turn goes on and the stream still carries every delta", load: intIn(1024, 1<<30, func(c *Config) *int { return &c.Limits.MaxOutputBytes })},
	{Name: "AGENTA_RUNNER_MAX_RESULT_BYTES", Component: cLimits, Type: tInt, Unit: "bytes", Default: "16777216", DefaultDoc: "`16777216` (16 MiB)", Doc: "events a JSON (`/run`) result holds, about their JSON size; past it the turn fails (429) with an error naming this. A streamed turn keeps no text deltas and is not failed by it", load: intIn(64<<10, 1<<30, func(c *Config) *int { return &c.Limits.MaxResultBytes })},
	{Name: "AGENTA_RUNNER_MAX_TURN_LOG_BYTES", Component: cLimits, Type: tInt, Unit: "bytes", Default: "67108864", DefaultDoc: "`67108864` (64 MiB)", Doc: "the harness's events one turn writes to the session log, about their JSON size (each event counts 128 bytes more, so a flood of tiny events is bounded too); past it the turn fails with an error naming this", load: intIn(64<<10, 1<<31-1, func(c *Config) *int { return &c.Limits.MaxTurnLogBytes })},
	{Name: "AGENTA_RUNNER_HISTORY_CACHE_BYTES", Component: cLimits, Type: tInt, Unit: "bytes", Default: "16777216", DefaultDoc: "`16777216` (16 MiB)", Doc: "recent requests' histories kept decoded, so a turn that repeats its conversation decodes only the messages it adds (memory: about three times this at most); `0` turns it off", load: intIn(0, 1<<31-1, func(c *Config) *int { return &c.Limits.HistoryCacheBytes })},
	{Name: "AGENTA_RUNNER_DATA_DIR", Component: cService, Type: tPath, DefaultDoc: "`$XDG_STATE_HOME/runner` or `~/.local/state/runner` (`/var/lib/runner` without a home)", Doc: "sandboxes, database, harnesses", Main: true, load: loadDataDir},
	{Name: "AGENTA_RUNNER_REPLICA_ID", Component: cService, Type: tString, DefaultDoc: "random, kept in the data dir", Doc: "stable id of this replica (heartbeats, leases, the platform's session owner key)", load: text(func(c *Config) *string { return &c.ReplicaID })},
	{Name: "AGENTA_RUNNER_LOG_LEVEL", Component: cService, Type: tEnum, Default: "info", Doc: "`debug`, `info`, `warn`, `error`, `silent`", Main: true, load: enum("use debug, info, warn, error or silent", []string{"debug", "info", "warn", "error", "silent"}, func(c *Config) *string { return &c.LogLevel })},
	{Name: "AGENTA_RUNNER_LOCAL_ISOLATION", Component: cLocal, Type: tEnum, Default: "bwrap", Doc: "`bwrap` or `none` (unconfined host process, development only)", Main: true, load: enum("use bwrap or none", []string{"bwrap", "none"}, func(c *Config) *string { return &c.Local.Isolation })},
	{Name: "AGENTA_RUNNER_LOCAL_MEMORY_MB", Component: cLocal, Type: tInt, Unit: "MiB", Default: "4096", Doc: "memory limit per local sandbox (`0`: none)", load: limitOf(16, func(c *Config) *int { return &c.Local.MemoryMB })},
	{Name: "AGENTA_RUNNER_LOCAL_PIDS", Component: cLocal, Type: tInt, Default: "1024", Doc: "process limit per local sandbox, threads included (`0`: none)", load: limitOf(8, func(c *Config) *int { return &c.Local.Pids })},
	{Name: "AGENTA_RUNNER_LOCAL_CPUS", Component: cLocal, Type: tFloat, DefaultDoc: "half the host's CPUs, at least `1`", Doc: "CPU quota per local sandbox, with an equal CPU weight per sandbox (`0`: neither)", load: loadCPUs},
	{Name: "AGENTA_RUNNER_LOCAL_HIDE", Component: cLocal, Type: tList, DefaultDoc: "—", Doc: "more host paths hidden from sandboxes (the runner's own config files), `:`-separated absolute paths; the paths the runner owns are always hidden", load: absPaths(func(c *Config) *[]string { return &c.Local.Hide })},
	{Name: "AGENTA_RUNNER_LOCAL_SANDBOX_UID", Component: cLocal, Type: tInt, Default: "0", DefaultDoc: "`0` (off)", Doc: "run sandboxes as this host user when the runner is root (needs `setpriv`)", load: intIn(0, 1<<31-1, func(c *Config) *int { return &c.Local.UID })},
	{Name: "AGENTA_RUNNER_LOCAL_SANDBOX_GID", Component: cLocal, Type: tInt, Default: "0", DefaultDoc: "`0` (off)", Doc: "the group of `AGENTA_RUNNER_LOCAL_SANDBOX_UID`", load: intIn(0, 1<<31-1, func(c *Config) *int { return &c.Local.GID })},
	{Name: "AGENTA_RUNNER_LOCAL_BWRAP", Component: cLocal, Type: tPath, DefaultDoc: "`bwrap` from `PATH`", Doc: "bubblewrap binary", load: text(func(c *Config) *string { return &c.Local.Bwrap })},
	{Name: "AGENTA_RUNNER_LOCAL_DISK_MB", Component: cLocal, Type: tInt, Unit: "MiB", Default: "4096", Doc: "disk quota per local sandbox (workspace, `$HOME`, `/tmp`; a loop-mounted image; needs root) (`0`: none)", load: limitOf(16, func(c *Config) *int { return &c.Local.DiskMB })},
	{Name: "AGENTA_RUNNER_DISK_RESERVE_MB", Component: cLocal, Type: tInt, Unit: "MiB", Default: "512", Doc: "free space of the data dir's filesystem that the sandboxes' disks together may never take; a sandbox that could is refused (`0`: none)", load: intIn(0, 1<<30, func(c *Config) *int { return &c.Local.DiskReserveMB })},
	{Name: "AGENTA_RUNNER_DATABASE_URL", Component: cStore, Type: tURL, DefaultDoc: "— (SQLite in the data dir)", Doc: "PostgreSQL URL for several replicas", Main: true, load: text(func(c *Config) *string { return &c.Store.DatabaseURL })},
	{Name: "AGENTA_RUNNER_ADVERTISE_URL", Component: cReplicas, Type: tURL, DefaultDoc: "`http://<listen address>:<port>`, the host name when listening on every address", Doc: "where the other replicas on the same PostgreSQL reach this one: a request for a session this replica holds is forwarded here (the Helm chart sets the pod's stable DNS name)", Main: true, load: loadAdvertiseURL},
	{Name: "AGENTA_RUNNER_PEER_TOKEN", Component: cReplicas, Type: tString, DefaultDoc: "`AGENTA_RUNNER_TOKEN`", Doc: "what a replica presents when it forwards a request to another, and requires of a forwarded one; the same on every replica, at least 16 characters", load: loadPeerToken},
	{Name: "AGENTA_RUNNER_PEER_CIDRS", Component: cReplicas, Type: tList, DefaultDoc: "— (the same host only)", Doc: "where a peer's advertised address may lie, `,`-separated: CIDRs (e.g. the cluster's pod range), checked on the address dialled, and DNS suffixes starting with a dot (e.g. `.runner-pods.agenta.svc`, a StatefulSet's headless Service: names only the replicas have); an advertised address read from the store outside them (and not this host's) is refused", load: loadPeerCIDRs},
	{Name: "AGENTA_RUNNER_HEARTBEAT_MS", Component: cReplicas, Type: tDuration, Default: "2000", Doc: "how often a replica writes its row in the replica registry; a replica silent for three of these is presumed dead when it does not answer", load: millis(func(c *Config) *time.Duration { return &c.Peers.Heartbeat })},
	{Name: "AGENTA_RUNNER_STORE_URL", Component: cWorkspace, Type: tURL, DefaultDoc: "— (`<data dir>/workspaces`)", Doc: "durable workspace store: `off`, an absolute path or `file:///dir`, or `s3://KEY:SECRET@host:port/bucket/prefix?region=…&insecure=1&sts=1&duration=<s>` (see [turns.md](turns.md#durable-workspaces))", Main: true, load: text(func(c *Config) *string { return &c.Workspace.StoreURL })},
	{Name: "AGENTA_RUNNER_WORKSPACE_CHECKPOINT_MS", Component: cWorkspace, Type: tDuration, Default: "30000", Doc: "how often a running turn checkpoints its durable files", load: millis(func(c *Config) *time.Duration { return &c.Workspace.CheckpointEvery })},
	{Name: "AGENTA_RUNNER_PLATFORM_MOUNTS", Component: cWorkspace, Type: tBool, Default: "off", Doc: "`on`: a request carrying the Agenta run credential gets its workspace and agent folder signed by the platform (`POST /sessions/mounts/sign`, `/mounts/agents/sign`), with that request's credential; a platform without storage falls back to `AGENTA_RUNNER_STORE_URL`", load: flag(func(c *Config) *bool { return &c.Workspace.PlatformMounts })},
	{Name: "AGENTA_RUNNER_KEY_GATEWAY", Component: cService, Type: tBool, Default: "on", Doc: "give local harnesses placeholder model keys, swapped for the real ones by the runner (see [security.md](security.md#model-keys))", load: flag(func(c *Config) *bool { return &c.KeyGateway })},
	{Name: "AGENTA_RUNNER_SESSION_KEEPALIVE", Component: cSessions, Type: tBool, Default: "on", Doc: "keep harnesses warm between turns", load: flag(func(c *Config) *bool { return &c.Sessions.KeepAlive })},
	{Name: "AGENTA_RUNNER_SESSION_POOL_MAX", Component: cSessions, Type: tInt, Default: "8", Doc: "warm local sessions (LRU); a bad value keeps the default with a warning", load: positive(func(c *Config) *int { return &c.Sessions.PoolMax })},
	{Name: "AGENTA_RUNNER_PREWARM", Component: cSessions, Type: tString, DefaultDoc: "— (off)", Doc: "pre-warmed slots kept ready for new sessions, `harness:n` or `harness@provider:n`, comma-separated (e.g. `claude:2,pi_core:1`): each a sandbox with its harness started and its session open, bound to a turn's key, model, files and tools only when a new session claims it, destroyed after that session; local provider only (see [turns.md](turns.md#pre-warmed-slots))", Main: true, load: loadPrewarm},
	{Name: "AGENTA_RUNNER_PREWARM_MEMORY_MB", Component: cSessions, Type: tInt, Unit: "MiB", Default: "2048", Doc: "memory the ready pre-warmed slots may hold together, each counted at `AGENTA_RUNNER_PREWARM_SLOT_MB`; no slot is started past it (`0`: no bound)", load: intIn(0, 1<<30, func(c *Config) *int { return &c.Prewarm.MemoryMB })},
	{Name: "AGENTA_RUNNER_PREWARM_SLOT_MB", Component: cSessions, Type: tInt, Unit: "MiB", Default: "512", Doc: "what one ready slot is counted at against `AGENTA_RUNNER_PREWARM_MEMORY_MB` (measured: [benchmarks.md](benchmarks.md#pre-warmed-slots))", load: intIn(1, 1<<30, func(c *Config) *int { return &c.Prewarm.SlotMB })},
	{Name: "AGENTA_RUNNER_SESSION_TTL_MS", Component: cSessions, Type: tDuration, Default: "60000", Doc: "idle warm session lifetime", load: millis(func(c *Config) *time.Duration { return &c.Sessions.TTL })},
	{Name: "AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS", Component: cSessions, Type: tDuration, Default: "600000", Doc: "warm lifetime of a session waiting for approval", load: millis(func(c *Config) *time.Duration { return &c.Sessions.ApprovalTTL })},
	{Name: "AGENTA_AGENT_HISTORY_MAX_CHARS", Component: cSessions, Type: tInt, Unit: "characters", Default: "100000", Doc: "replayed transcript window; a bad value keeps the default with a warning", load: positive(func(c *Config) *int { return &c.Sessions.HistoryMaxChars })},
	{Name: "AGENTA_RUNNER_RUN_TOTAL_TIMEOUT_MS", Component: cLimits, Type: tDuration, Default: "39600000", DefaultDoc: "`39600000` (11 h)", Doc: "whole-turn limit (`0` disables)", load: millisOff(func(c *Config) *time.Duration { return &c.Limits.RunTotalTimeout })},
	{Name: "AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS", Component: cLimits, Type: tDuration, Default: "1800000", Doc: "silence limit (`0` disables)", load: millisOff(func(c *Config) *time.Duration { return &c.Limits.RunIdleTimeout })},
	{Name: "AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS", Component: cLimits, Type: tDuration, Default: "120000", Doc: "time to first event (`0` disables)", load: millisOff(func(c *Config) *time.Duration { return &c.Limits.RunTTFBTimeout })},
	{Name: "AGENTA_RUNNER_TOOL_CALL_TIMEOUT_MS", Component: cLimits, Type: tDuration, Default: "1800000", Doc: "one tool call", load: millis(func(c *Config) *time.Duration { return &c.Limits.ToolCallTimeout })},
	{Name: "AGENTA_AGENT_TOOLS_TIMEOUT", Component: cTools, Type: tDuration, Default: "30000", Doc: "tool callback timeout when the tool's spec names none", load: millis(func(c *Config) *time.Duration { return &c.Tools.Timeout })},
	{Name: "AGENTA_AGENT_MCPS_HOST_ALLOWLIST", Component: cTools, Type: tList, DefaultDoc: "—", Doc: "comma-separated user MCP server hosts exempt from the https and private-address checks at admission", load: hosts(func(c *Config) *[]string { return &c.Tools.MCPHostAllowlist })},
	{Name: "AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS", Component: cHTTP, Type: tDuration, Default: "10000", Doc: "on SIGTERM: how long in-flight turns get to finish (the replica is not ready and refuses new turns meanwhile); what is left is then cancelled and the warm sessions parked, bounded by the same again", load: millis(func(c *Config) *time.Duration { return &c.HTTP.ShutdownTimeout })},
	{Name: "AGENTA_RUNNER_STREAM_PING_MS", Component: cHTTP, Type: tDuration, Default: "15000", Doc: "silence before a `{\"kind\":\"ping\"}` line", load: millis(func(c *Config) *time.Duration { return &c.HTTP.PingInterval })},
	{Name: "AGENTA_RUNNER_METRICS_ADDR", Component: cHTTP, Type: tAddr, DefaultDoc: "— (`/metrics` on the main port, with the token)", Doc: "`host:port` to serve `/metrics` on without the token, e.g. `0.0.0.0:9464`", load: listen(func(c *Config) *string { return &c.HTTP.MetricsAddr })},
	{Name: "AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS", Component: cHTTP, Type: tDuration, Default: "120000", Doc: "an idle keep-alive connection is closed after this", load: millis(func(c *Config) *time.Duration { return &c.HTTP.IdleTimeout })},
	{Name: "AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS", Component: cHTTP, Type: tDuration, Default: "30000", Doc: "the longest a request body may stall (the deadline moves with every read, so a long upload in progress goes on; a stalled one gets 400 and its connection closed)", load: millis(func(c *Config) *time.Duration { return &c.HTTP.ReadTimeout })},
	{Name: "AGENTA_RUNNER_MAX_CONNECTIONS", Component: cHTTP, Type: tInt, Default: "0", DefaultDoc: "`0`: half the descriptor limit", Doc: "open HTTP connections; beyond them a request gets 503 naming this setting, and `/health` and `/ready` are still served from a small reserve", load: intIn(0, 1<<30, func(c *Config) *int { return &c.HTTP.MaxConnections })},
	{Name: "AGENTA_RUNNER_HARNESS_DIR", Component: cService, Type: tPath, DefaultDoc: "`<data dir>/harnesses`", Doc: "where `runner harness install` puts harnesses", load: loadHarnessDir},
	{Name: "AGENTA_RUNNER_DATABASE_CONNECT_TIMEOUT_MS", Component: cStore, Type: tDuration, Default: "5000", Doc: "PostgreSQL: how long opening a connection may take", load: millis(func(c *Config) *time.Duration { return &c.Store.ConnectTimeout })},
	{Name: "AGENTA_RUNNER_DATABASE_STATEMENT_TIMEOUT_MS", Component: cStore, Type: tDuration, Default: "10000", Doc: "PostgreSQL: how long one store call may take (a client-side deadline, also sent as `statement_timeout`); a turn whose store does not answer within it fails, and `/ready` reports `store_unwritable`", load: millis(func(c *Config) *time.Duration { return &c.Store.StatementTimeout })},
	{Name: "AGENTA_RUNNER_STORE_PROBE_INTERVAL_MS", Component: cStore, Type: tDuration, Default: "5000", Doc: "how often the store (SQLite or PostgreSQL) is probed with a write for `/ready`; after a failed write it is probed sooner, with a backoff, and failed turns' outcomes are written again until the ledger holds them; `0`: no probes (readiness ignores the store)", load: millisOff(func(c *Config) *time.Duration { return &c.Store.ProbeInterval })},
	{Name: "AGENTA_RUNNER_PLATFORM", Component: cPlatform, Type: tBool, Default: "on", Doc: "mirror turns that carry a platform credential onto the Agenta API (see [operations.md](operations.md#running-under-agenta)); `off`: none of those calls", load: flag(func(c *Config) *bool { return &c.Platform.On })},
	{Name: "AGENTA_RUNNER_PLATFORM_HEARTBEAT_MS", Component: cPlatform, Type: tDuration, Default: "30000", Doc: "heartbeat period of a running turn: the bound on how late a Stop pressed on the platform takes effect", load: millis(func(c *Config) *time.Duration { return &c.Platform.HeartbeatInterval })},
	{Name: "AGENTA_RUNNER_PLATFORM_REFRESH_MS", Component: cPlatform, Type: tDuration, Default: "300000", Doc: "age at which the run credential is refreshed (`GET /access/permissions/check`)", load: millis(func(c *Config) *time.Duration { return &c.Platform.RefreshInterval })},
	{Name: "AGENTA_RUNNER_PLATFORM_QUEUE_MAX", Component: cPlatform, Type: tInt, Default: "10000", Doc: "platform calls waiting during an outage before new ones are dropped (counted, warned); a bad value keeps the default with a warning", load: positive(func(c *Config) *int { return &c.Platform.QueueMax })},
	{Name: "AGENTA_API_INTERNAL_URL", Aliases: []string{"AGENTA_API_URL"}, Component: cPlatform, Type: tURL, DefaultDoc: "— (the request's OTLP endpoint before `/otlp/`, else `http://api:8000`)", Doc: "the Agenta API the runner calls back", load: loadPlatformBase},
	{Name: "AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS", Component: cService, Type: tList, Default: "local", Doc: "comma list of `local`, `daytona`, `kubernetes` (see [kubernetes.md](kubernetes.md))", Main: true, load: loadProviders},
	{Name: "AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER", Aliases: []string{"SANDBOX_AGENT_PROVIDER"}, Component: cService, Type: tString, Default: "local", DefaultDoc: "`local` (the first enabled provider when `local` is not)", Doc: "provider for requests without `sandbox`", Main: true, load: loadDefaultProvider},
	{Name: "AGENTA_RUNNER_WORKSPACE_MODE", Component: cWorkspace, Type: tEnum, Default: "sync", Doc: "`sync`: restore on acquire and checkpoint (no FUSE, no privileges); `fuse`: mount the working directory from the S3 store with `rclone mount` (local provider only; needs rclone, fuse3 and /dev/fuse; see [turns.md](turns.md#durable-workspaces))", load: enum("use sync (restore and checkpoint, the default) or fuse (an rclone mount)", []string{"sync", "fuse"}, func(c *Config) *string { return &c.Workspace.Mode })},
	{Name: "AGENTA_RUNNER_LOCAL_NETWORK", Component: cLocal, Type: tEnum, Default: "isolated", Doc: "network `on`: `isolated` (own namespace, slirp4netns, nftables; see [security.md](security.md#local-isolation)) or `host` (shares the host's network, development only, logged at boot, shown in `/health`)", Main: true, load: enum("use isolated or host", []string{"isolated", "host"}, func(c *Config) *string { return &c.Local.Network })},
	{Name: "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW", Component: cLocal, Type: tList, DefaultDoc: "—", Doc: "destinations reachable despite the refused ranges (loopback, private, link-local, the host's networks): by network `on`, the `allowlist` proxy, the key gateway's upstream and model endpoints; CIDRs, addresses, `host:port` (loopback only this way; names resolved at boot), `,`-separated; the runner's own listeners stay refused", load: hosts(func(c *Config) *[]string { return &c.Local.NetworkAllow })},
	{Name: "DAYTONA_API_KEY", Aliases: []string{"AGENTA_RUNNER_DAYTONA_API_KEY"}, AliasFirst: true, Component: cDaytona, Type: tString, DefaultDoc: "—", Doc: "required when `daytona` is enabled", Main: true, load: text(func(c *Config) *string { return &c.Daytona.APIKey })},
	{Name: "DAYTONA_API_URL", Aliases: []string{"AGENTA_RUNNER_DAYTONA_API_URL"}, AliasFirst: true, Component: cDaytona, Type: tURL, DefaultDoc: "`https://app.daytona.io/api`", Doc: "Daytona endpoint", load: text(func(c *Config) *string { return &c.Daytona.APIURL })},
	{Name: "DAYTONA_TARGET", Aliases: []string{"AGENTA_RUNNER_DAYTONA_TARGET"}, AliasFirst: true, Component: cDaytona, Type: tString, DefaultDoc: "the organisation's default", Doc: "Daytona region", load: text(func(c *Config) *string { return &c.Daytona.Target })},
	{Name: "DAYTONA_SNAPSHOT", Aliases: []string{"AGENTA_RUNNER_DAYTONA_SNAPSHOT"}, AliasFirst: true, Component: cDaytona, Type: tString, DefaultDoc: "`" + defaultDaytonaSnapshot + "` unless `DAYTONA_IMAGE` is set", Doc: "sandbox snapshot (exclusive with `DAYTONA_IMAGE`)", load: text(func(c *Config) *string { return &c.Daytona.Snapshot })},
	{Name: "DAYTONA_IMAGE", Aliases: []string{"AGENTA_RUNNER_DAYTONA_IMAGE"}, AliasFirst: true, Component: cDaytona, Type: tString, DefaultDoc: "—", Doc: "sandbox image (exclusive with `DAYTONA_SNAPSHOT`)", load: text(func(c *Config) *string { return &c.Daytona.Image })},
	{Name: "DAYTONA_AUTOSTOP", Aliases: []string{"AGENTA_RUNNER_DAYTONA_AUTOSTOP_MINUTES"}, AliasFirst: true, Component: cDaytona, Type: tInt, Unit: "minutes", Default: "15", Doc: "Daytona stops a sandbox idle this long", load: intIn(1, 1<<30, func(c *Config) *int { return &c.Daytona.AutoStopMinutes })},
	{Name: "DAYTONA_AUTODELETE", Aliases: []string{"AGENTA_RUNNER_DAYTONA_AUTODELETE_MINUTES"}, AliasFirst: true, Component: cDaytona, Type: tInt, Unit: "minutes", Default: "30", Doc: "Daytona deletes a sandbox stopped this long", load: intIn(1, 1<<30, func(c *Config) *int { return &c.Daytona.AutoDeleteMinutes })},
	{Name: "AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS", Component: cDaytona, Type: tDuration, Default: "120000", Doc: "warm Daytona sandbox lifetime (`0` disables); keep it below `DAYTONA_AUTOSTOP`", load: millisOff(func(c *Config) *time.Duration { return &c.Daytona.IdleTTL })},
	{Name: "AGENTA_RUNNER_DAYTONA_SESSION_MAX_WARM", Component: cDaytona, Type: tInt, Default: "20", Doc: "warm Daytona sandboxes; a bad value keeps the default with a warning", load: positive(func(c *Config) *int { return &c.Daytona.MaxWarm })},
	{Name: "AGENTA_RUNNER_DAYTONA_OPAQUE_SECRETS", Component: cDaytona, Type: tBool, Default: "on", Doc: "keep keys out of Daytona sandboxes: credentials the runner cannot hide are refused; `off` passes them into the sandbox's environment", load: loadOpaque},
	{Name: "AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS", Component: cDaytona, Type: tDuration, Default: "600000", Doc: "how often to delete Daytona sandboxes no session owns (`0` disables; at least 60000)", load: millisOff(func(c *Config) *time.Duration { return &c.Daytona.ReapInterval })},
	{Name: "AGENTA_RUNNER_KUBERNETES_KUBECONFIG", Component: cKube, Type: tPath, DefaultDoc: "— (in-cluster: the pod's service account)", Doc: "kubeconfig the provider reaches the API server with", load: text(func(c *Config) *string { return &c.Kubernetes.Kubeconfig })},
	{Name: "AGENTA_RUNNER_KUBERNETES_NAMESPACE", Component: cKube, Type: tString, DefaultDoc: "—", Doc: "required when `kubernetes` is enabled: the namespace sandbox pods and their NetworkPolicies go to (the runner's Role must be there)", load: text(func(c *Config) *string { return &c.Kubernetes.Namespace })},
	{Name: "AGENTA_RUNNER_KUBERNETES_IMAGE", Component: cKube, Type: tString, DefaultDoc: "—", Doc: "required when `kubernetes` is enabled: the sandbox image, carrying the runner binary and the harnesses (the project's image does)", load: text(func(c *Config) *string { return &c.Kubernetes.Image })},
	{Name: "AGENTA_RUNNER_KUBERNETES_RUNNER_PATH", Component: cKube, Type: tPath, Default: "/usr/local/bin/runner", Doc: "the runner binary inside the sandbox image; the pod runs `<it> sandboxd`", load: text(func(c *Config) *string { return &c.Kubernetes.RunnerPath })},
	{Name: "AGENTA_RUNNER_KUBERNETES_HARNESS_PREFIX", Component: cKube, Type: tPath, Default: "/opt/runner/harnesses", Doc: "where the sandbox image installs the harnesses, one npm prefix per harness (`<it>/<dir>/node_modules/.bin/<bin>`); the default is where the project's image puts them; pods never see `AGENTA_RUNNER_HARNESS_DIR`", load: text(func(c *Config) *string { return &c.Kubernetes.HarnessPrefix })},
	{Name: "AGENTA_RUNNER_KUBERNETES_RUNTIME_CLASS", Component: cKube, Type: tString, DefaultDoc: "— (the cluster's default runtime)", Doc: "`runtimeClassName` of sandbox pods, e.g. `gvisor` or `kata`", load: text(func(c *Config) *string { return &c.Kubernetes.RuntimeClass })},
	{Name: "AGENTA_RUNNER_KUBERNETES_RESOURCES", Component: cKube, Type: tString, Default: `{"requests":{"cpu":"250m","memory":"512Mi"},"limits":{"memory":"4Gi","ephemeral-storage":"4Gi"}}`, DefaultDoc: "requests 250m CPU and 512Mi, limits 4Gi memory and 4Gi `ephemeral-storage`", Doc: "the sandbox container's requests and limits, as JSON `ResourceRequirements`; the `ephemeral-storage` limit bounds the writable volumes too", load: text(func(c *Config) *string { return &c.Kubernetes.Resources })},
	{Name: "AGENTA_RUNNER_KUBERNETES_NODE_SELECTOR", Component: cKube, Type: tString, DefaultDoc: "—", Doc: "`nodeSelector` of sandbox pods, a JSON object", load: text(func(c *Config) *string { return &c.Kubernetes.NodeSelector })},
	{Name: "AGENTA_RUNNER_KUBERNETES_TOLERATIONS", Component: cKube, Type: tString, DefaultDoc: "—", Doc: "`tolerations` of sandbox pods, a JSON list", load: text(func(c *Config) *string { return &c.Kubernetes.Tolerations })},
	{Name: "AGENTA_RUNNER_KUBERNETES_AFFINITY", Component: cKube, Type: tString, DefaultDoc: "—", Doc: "`affinity` of sandbox pods, a JSON `Affinity`", load: text(func(c *Config) *string { return &c.Kubernetes.Affinity })},
	{Name: "AGENTA_RUNNER_KUBERNETES_CLUSTER_CIDRS", Component: cKube, Type: tList, DefaultDoc: "—", Doc: "the cluster's pod and service ranges, `,`-separated: refused under network `on` beside the private and link-local ranges", load: hosts(func(c *Config) *[]string { return &c.Kubernetes.ClusterCIDRs })},
	{Name: "AGENTA_RUNNER_KUBERNETES_PENDING_TIMEOUT_MS", Component: cKube, Type: tDuration, Default: "120000", Doc: "a sandbox pod still `Pending` this long fails the turn with the scheduler's reason", load: millis(func(c *Config) *time.Duration { return &c.Kubernetes.PendingTimeout })},
	{Name: "AGENTA_RUNNER_KUBERNETES_STORAGE_CLASS", Component: cKube, Type: tString, DefaultDoc: "— (no parking: an idle pod is deleted with its files)", Doc: "turns parking on: each sandbox's workspace, agent folder and home live on a PersistentVolumeClaim of this StorageClass, so an idle pod is deleted and its files kept for the next turn's new pod (the Role then needs `persistentvolumeclaims`)", load: text(func(c *Config) *string { return &c.Kubernetes.StorageClass })},
	{Name: "AGENTA_RUNNER_KUBERNETES_VOLUME_SIZE", Component: cKube, Type: tString, Default: "4Gi", Doc: "the size each sandbox's claim requests, with parking on", load: text(func(c *Config) *string { return &c.Kubernetes.VolumeSize })},
	{Name: "AGENTA_RUNNER_KUBERNETES_POLICY_PROBE", Component: cKube, Type: tBool, Default: "on", Doc: "at boot, in the background, one probe pod under a deny-all-egress NetworkPolicy dials its node's kubelet: a connection means the cluster's CNI does not enforce NetworkPolicy (logged loudly, in `/health`'s `network_policy`); `off`: only the served API groups are checked, a heuristic (see [kubernetes.md](kubernetes.md))", load: flag(func(c *Config) *bool { return &c.Kubernetes.PolicyProbe })},
	{Name: "AGENTA_RUNNER_KUBERNETES_SESSION_IDLE_TTL_MS", Component: cKube, Type: tDuration, Default: "120000", Doc: "warm sandbox pod lifetime (`0` disables)", load: millisOff(func(c *Config) *time.Duration { return &c.Kubernetes.IdleTTL })},
	{Name: "AGENTA_RUNNER_KUBERNETES_SESSION_MAX_WARM", Component: cKube, Type: tInt, Default: "20", Doc: "warm sandbox pods; a bad value keeps the default with a warning", load: positive(func(c *Config) *int { return &c.Kubernetes.MaxWarm })},
	{Name: "AGENTA_RUNNER_HARNESS_<NAME>", Component: cService, Type: tString, DefaultDoc: "the built-ins (see [harnesses.md](harnesses.md))", Doc: "a harness's launch command, quotes and backslash escapes honoured: adds harness `<name>` or replaces a built-in's command", Main: true, load: loadHarnesses},
	{Name: "AGENTA_RUNNER_PROJECT_TOKENS", Component: cHTTP, Type: tString, DefaultDoc: "—", Doc: "per-project tokens, `projA=tokenA,projB=tokenB` or `@/path/file` (pairs by comma or line): a project's token is accepted only on `/run`, `/stream`, `/kill` and `/v1` for that project (a request naming no project is scoped to it; naming another is 403); `AGENTA_RUNNER_TOKEN` stays the operator's, for every project", load: loadProjectTokens},
	{Name: "AGENTA_RUNNER_JOBS", Component: cJobs, Type: tBool, Default: "on", Doc: "background and scheduled jobs (`/v1/jobs`, see [jobs.md](jobs.md)); `off`: no queue, and `/v1/jobs` answers 503 naming this", load: flag(func(c *Config) *bool { return &c.Jobs.Enabled })},
	{Name: "AGENTA_RUNNER_JOBS_CONCURRENCY", Component: cJobs, Type: tInt, Default: "4", Doc: "job turns one replica runs at once: a share of their own, beside (not within) `AGENTA_RUNNER_CONCURRENCY_LIMIT`", load: intIn(1, 1<<20, func(c *Config) *int { return &c.Jobs.Concurrency })},
	{Name: "AGENTA_RUNNER_JOBS_PROJECT_CONCURRENCY", Component: cJobs, Type: tString, DefaultDoc: "— (`AGENTA_RUNNER_JOBS_CONCURRENCY`)", Doc: "per-project caps on one replica's running jobs, `proj=2,*=3` (`*`: every other project); a run over its cap waits, spending no attempt", load: loadJobsProjects},
	{Name: "AGENTA_RUNNER_JOBS_MAX_ATTEMPTS", Component: cJobs, Type: tInt, Default: "3", Doc: "a run's attempts unless its `retry.maxAttempts` says (1 to 25)", load: intIn(1, 25, func(c *Config) *int { return &c.Jobs.MaxAttempts })},
	{Name: "AGENTA_RUNNER_JOBS_RETRY_BASE_MS", Component: cJobs, Type: tDuration, Default: "1000", Doc: "first retry's delay, of a run and of a webhook; it doubles up to 5 minutes", load: millis(func(c *Config) *time.Duration { return &c.Jobs.RetryBase })},
	{Name: "AGENTA_RUNNER_JOBS_SCHEDULE_TICK_MS", Component: cJobs, Type: tDuration, Default: "1000", Doc: "how often the leader checks the schedules; the shortest `intervalMs` (at least 1000)", load: loadJobsTick},
	{Name: "AGENTA_RUNNER_JOBS_POLL_MS", Component: cJobs, Type: tDuration, Default: "2000", Doc: "how often a run parked for an approval, or waiting for a busy session or its project's cap, looks again", load: millis(func(c *Config) *time.Duration { return &c.Jobs.Poll })},
	{Name: "AGENTA_RUNNER_JOBS_RESCUE_AFTER_MS", Component: cJobs, Type: tDuration, Default: "3600000", DefaultDoc: "`3600000` (1 h)", Doc: "a run left running this long is taken for its dead replica's and run elsewhere (a committed turn is not run again; a live one keeps its session's lease)", load: millis(func(c *Config) *time.Duration { return &c.Jobs.RescueAfter })},
	{Name: "AGENTA_RUNNER_JOBS_SEAL_KEY", Component: cJobs, Type: tString, DefaultDoc: "— (SQLite: `jobs.key`, made in the data dir)", Doc: "64 hex digits (`openssl rand -hex 32`): seals the secrets of a job's request (credentials, headers) in its row; every replica needs the same", load: loadJobsSealKey},
	{Name: "AGENTA_RUNNER_JOBS_WEBHOOK_SECRETS", Component: cJobs, Type: tString, DefaultDoc: "—", Doc: "webhook signing secrets a job's `webhook.secretRef` names, `name=whsec_…,…` (at least 16 characters each)", load: loadJobsSecrets},

	// Read elsewhere, or set by the runner for its own children.
	{Name: "AWS_CA_BUNDLE", Component: cWorkspace, Type: tPath, DefaultDoc: "—", Doc: "a PEM bundle of extra CAs trusted for the S3 store (as the AWS tools read it), beside the system's"},
	{Name: "RUNNER_PPROF_ADDR", Component: cService, Type: tAddr, DefaultDoc: "— (only in a `go build -tags runnerpprof` build)", Doc: "loopback address serving `net/http/pprof`, for profiling; release builds have no such listener"},
	{Name: "NO_COLOR", Component: cCLI, Type: tString, DefaultDoc: "—", Doc: "set (or `TERM=dumb`): `runner run` and `runner sessions` print no colour, even on a terminal"},
	{Name: "AGENTA_RUNNER_INTERNAL_NET_SETUP", Component: cInternal, Type: tString, DefaultDoc: "—", Doc: "set only by the runner on its own binary when it runs it again (`runner sandbox-net-setup`) to install a sandbox's nftables table, so that a binary that does not dispatch that command refuses to start sandboxes; never set it yourself"},
	{Name: "RUNNER_TOOLS_SOCKET", Component: cInternal, Type: tPath, DefaultDoc: "—", Doc: "set by the runner in a harness's environment for `runner mcp-stdio` inside the sandbox: the tool relay's socket; never set it yourself"},
	{Name: "RUNNER_TOOLS_SECRET", Component: cInternal, Type: tString, DefaultDoc: "—", Doc: "set by the runner beside `RUNNER_TOOLS_SOCKET`: that session's binding token; never set it yourself"},
	{Name: "AGENTA_AGENT_MOUNT_DIR", Component: cInternal, Type: tPath, DefaultDoc: "—", Doc: "set by the runner in a harness's environment: the agent's shared durable folder (see [turns.md](turns.md#durable-workspaces)); not read by the runner"},
	{Name: "RUNNER_SANDBOXD_TOKEN", Component: cInternal, Type: tString, DefaultDoc: "—", Doc: "`runner sandboxd` inside a Daytona sandbox or a Kubernetes sandbox pod, started by the runner: the daemon's token when no `--token-file`; never set it yourself"},
	{Name: "RUNNER_SANDBOXD_LISTEN", Component: cInternal, Type: tAddr, DefaultDoc: "—", Doc: "`runner sandboxd`: its listen address; never set it yourself"},
	{Name: "RUNNER_SANDBOXD_SOCKET", Component: cInternal, Type: tPath, DefaultDoc: "—", Doc: "`runner sandboxd`: the channel socket its children dial; never set it yourself"},
}

// The loaders of the table: each reads one setting into its field, with
// the default parsed by the same code as a set value.

func text(field func(*Config) *string) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) {
		if v := l.first(s.names()...); v != "" {
			*field(c) = v
			return
		}
		*field(c) = s.Default
	}
}

func enum(hint string, values []string, field func(*Config) *string) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) {
		v := strings.ToLower(l.str(s.Name, s.Default))
		if !contains(values, v) {
			l.fail(fmt.Sprintf("%s %q: %s", s.Name, v, hint))
		}
		*field(c) = v
	}
}

func intIn(lo, hi int, field func(*Config) *int) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) {
		*field(c) = l.strictInt(l.pick(s), l.defaultInt(s), lo, hi)
	}
}

func int64In(lo, hi int, field func(*Config) *int64) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) {
		*field(c) = int64(l.strictInt(l.pick(s), l.defaultInt(s), lo, hi))
	}
}

func limitOf(lo int, field func(*Config) *int) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) { *field(c) = l.limit(s.Name, l.defaultInt(s), lo) }
}

func positive(field func(*Config) *int) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) { *field(c) = l.lenientInt(s.Name, l.defaultInt(s)) }
}

func millis(field func(*Config) *time.Duration) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) { *field(c) = l.ms(s.Name, int64(l.defaultInt(s))) }
}

func millisOff(field func(*Config) *time.Duration) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) { *field(c) = l.msOff(s.Name, int64(l.defaultInt(s))) }
}

func flag(field func(*Config) *bool) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) {
		def, ok := parseBool(s.Default)
		if !ok {
			l.fail(fmt.Sprintf("config: %s has the default %q, not on or off", s.Name, s.Default))
		}
		*field(c) = l.boolean(s.Name, def)
	}
}

func hosts(field func(*Config) *[]string) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) { *field(c) = l.list(s.Name) }
}

func absPaths(field func(*Config) *[]string) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) { *field(c) = l.paths(s.Name) }
}

func listen(field func(*Config) *string) func(*loader, *Setting, *Config) {
	return func(l *loader, s *Setting, c *Config) { *field(c) = l.listenAddr(s.Name) }
}

func loadDataDir(l *loader, s *Setting, c *Config) {
	c.DataDir = l.str(s.Name, defaultDataDir(l.get))
}

func loadHarnessDir(l *loader, s *Setting, c *Config) {
	c.HarnessDir = l.str(s.Name, filepath.Join(c.DataDir, "harnesses"))
}

func loadCPUs(l *loader, s *Setting, c *Config) {
	c.Local.CPUs = l.float(s.Name, DefaultLocalCPUs())
	if c.Local.CPUs < 0 {
		l.fail(s.Name + " must be a positive number, or 0 for no limit")
	}
}

func loadOpaque(l *loader, s *Setting, c *Config) {
	c.Daytona.OpaqueSecrets = opaque(l.str(s.Name, s.Default))
}

func loadHarnesses(l *loader, _ *Setting, c *Config) { c.Harnesses = harnesses(l.environ, l) }

func loadProjectTokens(l *loader, _ *Setting, c *Config) {
	c.HTTP.ProjectTokens = projectTokens(l, c.HTTP.Token)
}

// pick is the name a setting is read under: the first of its names that
// is set, else its own.
func (l *loader) pick(s *Setting) string {
	for _, k := range s.names() {
		if _, ok := l.env[k]; ok {
			return k
		}
	}
	return s.Name
}

// defaultInt is a setting's default as an integer; the table is checked
// by a test, so a bad one is a programming error reported as a problem.
func (l *loader) defaultInt(s *Setting) int {
	n, err := strconv.Atoi(s.Default)
	if err != nil {
		l.fail(fmt.Sprintf("config: %s has the default %q, not an integer", s.Name, s.Default))
	}
	return n
}
