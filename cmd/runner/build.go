package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/acp"
	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/lograte"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/sqlite"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/tools/relay"
)

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch level {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	case "silent":
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// logBurstWindow is how long serve's log counts identical warnings and
// errors before writing their count (a store that fails every write must
// not write thousands of lines a second).
const logBurstWindow = 10 * time.Second

// rateLimited wraps log's handler in a lograte.Handler; the returned
// function writes the counts left and must run last.
func rateLimited(log *slog.Logger) (*slog.Logger, func()) {
	h := lograte.New(log.Handler(), logBurstWindow)
	return slog.New(h), h.Close
}

// buildService wires the implementations the configuration names. It
// returns the store too (serve's replica registry); the returned close
// function releases it. obs receives the metrics
// (nil: none); it also implements metrics.Platform and metrics.Checkpoints
// when it is serve's.
//
// eg is the egress policy every dial for a sandbox follows (the allowlist
// proxy, the key gateway's upstream) and requests are admitted by; serve
// adds its listeners to it.
func buildService(ctx context.Context, cfg config.Config, environ []string, log *slog.Logger, obs metrics.Observer, eg *egress.Policy) (*runner.Service, store.Store, func(), error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("data dir %s: %w (set AGENTA_RUNNER_DATA_DIR to a writable directory)", cfg.DataDir, err)
	}
	if _, err := overrideBinds(cfg); err != nil { // override_linux.go: refused at boot
		return nil, nil, nil, err
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	replica, err := replicaID(cfg)
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	tc, stopTools, err := startTools(ctx, cfg, log)
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	var gw *gateway.Gateway
	if cfg.KeyGateway {
		if gw, err = gateway.New(log, eg); err != nil {
			stopTools()
			st.Close()
			return nil, nil, nil, err
		}
	}
	svc, closeProviders, err := newService(cfg, environ, log, st, replica, tc, gw, eg, obs)
	if err != nil {
		stopTools()
		if gw != nil {
			gw.Close()
		}
		st.Close()
		return nil, nil, nil, err
	}
	return svc, st, func() {
		closeProviders()
		stopTools()
		if gw != nil {
			gw.Close()
		}
		st.Close()
	}, nil
}

// startTools listens on the tool relay's unix socket. Harnesses reach it
// through `runner mcp-stdio`, this very binary, bound into each sandbox.
func startTools(ctx context.Context, cfg config.Config, log *slog.Logger) (runner.ToolsConfig, func(), error) {
	exe, err := runnerBinary()
	if err != nil {
		return runner.ToolsConfig{}, nil, fmt.Errorf("mcp-stdio: %w", err)
	}
	ts, err := newToolSocket(cfg.ToolsSocketDir())
	if err != nil {
		return runner.ToolsConfig{}, nil, err
	}
	sock := ts.Path
	// World-connectable: a sandbox may run under another uid; the
	// per-session token is the access control.
	ln, err := relay.Listen(sock, 0o666)
	if err != nil {
		ts.release()
		return runner.ToolsConfig{}, nil, fmt.Errorf("tool relay socket %s: %w", sock, err)
	}
	r := relay.New(log)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Serve(rctx, ln) }()
	tc := runner.ToolsConfig{
		Base:   tools.Config{DefaultTimeout: cfg.Tools.Timeout, HostAllowlist: cfg.Tools.MCPHostAllowlist},
		Relay:  r,
		Socket: sock,
		Shim:   []string{exe, "mcp-stdio"},
	}
	return tc, func() { cancel(); _ = ln.Close(); <-done; ts.release() }, nil
}

func openStore(ctx context.Context, cfg config.Config) (store.Store, error) {
	if cfg.Store.DatabaseURL != "" {
		st, err := postgres.Open(ctx, cfg.Store.DatabaseURL, postgres.Options{ConnectTimeout: cfg.Store.ConnectTimeout, StatementTimeout: cfg.Store.StatementTimeout})
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL (AGENTA_RUNNER_DATABASE_URL): %w", err)
		}
		return st, nil
	}
	path := filepath.Join(cfg.DataDir, "runner.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open SQLite store %s: %w", path, err)
	}
	return st, nil
}

// replicaID is AGENTA_RUNNER_REPLICA_ID, or an id kept in the data dir so
// that a restarted runner recognises the turns it was running.
func replicaID(cfg config.Config) (string, error) {
	if cfg.ReplicaID != "" {
		return cfg.ReplicaID, nil
	}
	path := filepath.Join(cfg.DataDir, "replica-id")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "runner-" + hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write replica id: %w", err)
	}
	return id, nil
}

// newService builds the enabled providers and the service over them. The
// returned function closes the providers that hold something of their
// own (the Kubernetes provider's pod watch), after the service's Shutdown.
func newService(cfg config.Config, environ []string, log *slog.Logger, st store.Store, replica string, tc runner.ToolsConfig, gw *gateway.Gateway, eg *egress.Policy, obs metrics.Observer) (*runner.Service, func(), error) {
	providers, err := newProviders(cfg, replica, eg, log)
	closeProviders := func() {
		for _, p := range providers {
			if c, ok := p.(io.Closer); ok {
				_ = c.Close()
			}
		}
	}
	if err != nil {
		closeProviders()
		return nil, nil, err
	}
	svc, err := serviceOver(cfg, environ, log, st, replica, tc, gw, eg, obs, providers)
	if err != nil {
		closeProviders()
		return nil, nil, err
	}
	return svc, closeProviders, nil
}

// newProviders makes the enabled sandbox providers; on an error it
// returns those made so far, for the caller to close.
func newProviders(cfg config.Config, replica string, eg *egress.Policy, log *slog.Logger) ([]sandbox.Provider, error) {
	var providers []sandbox.Provider
	for _, name := range cfg.EnabledProviders {
		switch name {
		case "local":
			p, err := newLocal(cfg, eg, log)
			if err != nil {
				return providers, fmt.Errorf("local sandbox provider: %w", err)
			}
			providers = append(providers, p)
		case "daytona":
			p, err := newDaytona(cfg, replica, log)
			if err != nil {
				return providers, fmt.Errorf("daytona sandbox provider: %w", err)
			}
			providers = append(providers, p)
		case "kubernetes":
			p, err := newKubernetes(cfg, replica, log)
			if err != nil {
				return providers, fmt.Errorf("kubernetes sandbox provider: %w", err)
			}
			providers = append(providers, p)
		}
	}
	return providers, nil
}

// serviceOver is the service over providers.
func serviceOver(cfg config.Config, environ []string, log *slog.Logger, st store.Store, replica string, tc runner.ToolsConfig, gw *gateway.Gateway, eg *egress.Policy, obs metrics.Observer, providers []sandbox.Provider) (*runner.Service, error) {
	pools := map[string]runner.PoolConfig{
		"daytona":    {Enabled: cfg.Daytona.IdleTTL > 0, Max: cfg.Daytona.MaxWarm, IdleTTL: cfg.Daytona.IdleTTL, ApprovalTTL: cfg.Sessions.ApprovalTTL},
		"kubernetes": {Enabled: cfg.Kubernetes.IdleTTL > 0, Max: cfg.Kubernetes.MaxWarm, IdleTTL: cfg.Kubernetes.IdleTTL, ApprovalTTL: cfg.Sessions.ApprovalTTL},
	}
	refuse := map[string]string{}
	if cfg.Daytona.OpaqueSecrets {
		refuse["daytona"] = "this request carries credentials the runner cannot keep out of a Daytona sandbox (user MCP server credentials, local_use model credentials, or any credential while AGENTA_RUNNER_KEY_GATEWAY is off), and secret hiding is on (AGENTA_RUNNER_DAYTONA_OPAQUE_SECRETS). Send opaque_http model credentials with an endpoint.baseUrl (the key gateway hides those), use the local provider, or set AGENTA_RUNNER_DAYTONA_OPAQUE_SECRETS=off to pass them into the sandbox's environment"
	}
	specs := map[string]agent.Spec{}
	for name, cmd := range launchTable(cfg) {
		specs[name] = harness.Spec(name, cmd)
	}
	workspaces, err := workspaceResolver(cfg)
	if err != nil {
		return nil, fmt.Errorf("durable workspace store: %w", err)
	}
	workspaces = platformWorkspaces(cfg, workspaces)
	mounter, err := workspaceMounter(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("durable workspace mount: %w", err)
	}
	return runner.New(runner.Config{
		Workspaces:      workspaces,
		CheckpointEvery: cfg.Workspace.CheckpointEvery,
		Mounter:         mounter,
		Version:         version,
		DefaultProvider: cfg.DefaultProvider,
		Harnesses:       specs,
		BaseEnv:         baseEnv(cfg, environ),
		HistoryMaxChars: cfg.Sessions.HistoryMaxChars,
		ReplicaID:       replica,
		KeepAlive:       cfg.Sessions.KeepAlive,
		PoolMax:         cfg.Sessions.PoolMax,
		SessionTTL:      cfg.Sessions.TTL,
		ApprovalTTL:     cfg.Sessions.ApprovalTTL,
		Pools:           pools,
		Prewarm:         prewarmConfig(cfg),
		Gateway:         gw,
		Egress:          eg,
		Limits:          runner.Limits{Total: cfg.Limits.RunTotalTimeout, TTFB: cfg.Limits.RunTTFBTimeout, Idle: cfg.Limits.RunIdleTimeout, ToolCall: cfg.Limits.ToolCallTimeout},
		Caps:            runner.Caps{Output: cfg.Limits.MaxOutputBytes, Result: cfg.Limits.MaxResultBytes, TurnLog: cfg.Limits.MaxTurnLogBytes},
		SecretRefusal:   refuse,
		Tools:           tc,
		Configure:       harnessConfigurer(cfg, environ, providers...),
		Binds:           append(harnessBinds(cfg, log), overrideBindsChecked(cfg)...),
		Observers:       observers(cfg, replica, log, obs),
		Workdir:         cfg.Workdir,
		Metrics:         obs,
		Logger:          log,
	}, providers, &acp.Driver{ClientVersion: version, MaxLine: cfg.Limits.MaxEventBytes}, st)
}

// prewarmConfig is the pre-warm pool of AGENTA_RUNNER_PREWARM; none for
// a runner working in one directory (runner run -workdir).
func prewarmConfig(cfg config.Config) runner.PrewarmConfig {
	if cfg.Workdir != "" {
		return runner.PrewarmConfig{}
	}
	out := runner.PrewarmConfig{MemoryBudget: int64(cfg.Prewarm.MemoryMB) << 20, SlotMemory: int64(cfg.Prewarm.SlotMB) << 20}
	for _, sh := range cfg.Prewarm.Shapes {
		out.Shapes = append(out.Shapes, runner.PrewarmShape{Harness: sh.Harness, Provider: sh.Provider, Slots: sh.Slots})
	}
	return out
}

// baseEnv is what every harness inherits: where to find programs, and the
// locale. Nothing else of the runner's environment (its token, cloud keys)
// reaches a harness.
func baseEnv(cfg config.Config, environ []string) []string {
	path := "/usr/local/bin:/usr/bin:/bin"
	lang := "C.UTF-8"
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			path = v
		}
		if v, ok := strings.CutPrefix(kv, "LANG="); ok && v != "" {
			lang = v
		}
	}
	return []string{"PATH=" + path, "LANG=" + lang}
}

// newDaytona builds the Daytona provider; this binary is what it uploads
// into sandboxes and runs there as `runner sandboxd`.
func newDaytona(cfg config.Config, replica string, log *slog.Logger) (*daytona.Provider, error) {
	exe, err := runnerBinary()
	if err != nil {
		return nil, err
	}
	return daytona.New(daytona.Config{
		APIKey:            cfg.Daytona.APIKey,
		APIURL:            cfg.Daytona.APIURL,
		Target:            cfg.Daytona.Target,
		Snapshot:          cfg.Daytona.Snapshot,
		Image:             cfg.Daytona.Image,
		AutoStopMinutes:   cfg.Daytona.AutoStopMinutes,
		AutoDeleteMinutes: cfg.Daytona.AutoDeleteMinutes,
		DaemonBinary:      exe,
		Version:           version,
		RunnerID:          replica,
	}, log)
}

// runnerBinary is this binary's own path: sandboxes run it again as
// `mcp-stdio`, `sandbox-proxy-bridge` and, uploaded, `sandboxd`.
func runnerBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the runner binary: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return exe, nil
}

// harnessConfigurer is the harness family's configurer for this
// deployment: the harness dir, the operator's overrides of built-in
// names, the providers whose images carry the harnesses, and the runner's
// own environment (read only for credentialMode runtime_provided).
func harnessConfigurer(cfg config.Config, environ []string, providers ...sandbox.Provider) runner.Configurer {
	o := harness.Options{Dir: cfg.HarnessDir, Overrides: map[string][]string{}, Images: map[string]string{}, Getenv: envLookup(environ)}
	for name, h := range cfg.Harnesses {
		o.Overrides[name] = h.Command
	}
	for _, p := range providers {
		if hi, ok := p.(sandbox.HarnessImage); ok {
			o.Images[p.Name()] = hi.HarnessPrefix()
		}
	}
	return harness.NewConfigurer(o)
}

// harnessBinds makes the harness dir visible, read-only, in every
// sandbox: by default it lies in the data dir, which bubblewrap hides. A
// bind must exist when a sandbox is created, so the dir is made here.
func harnessBinds(cfg config.Config, log *slog.Logger) []sandbox.Bind {
	if err := os.MkdirAll(cfg.HarnessDir, 0o755); err != nil {
		log.Warn("harness dir unavailable; installed harnesses cannot run in isolated sandboxes", logkey.Error, err)
		return nil
	}
	return []sandbox.Bind{{Path: cfg.HarnessDir}}
}

// overrideBindsChecked is overrideBinds once boot has refused its errors.
func overrideBindsChecked(cfg config.Config) []sandbox.Bind {
	b, _ := overrideBinds(cfg)
	return b
}
