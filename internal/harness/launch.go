package harness

import (
	"context"
	"maps"
	"os"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// Setup is what a configurer is given for one session.
type Setup struct {
	Harness string
	// Provider is the sandbox provider the harness runs in ("local",
	// "daytona"): where its installed command lives.
	Provider string
	Request  *wire.Request
	// Env is the materialised model connection (already validated).
	Env map[string]string
	// Home is the session's private $HOME inside the sandbox.
	Home string
	// Root reports whether the harness runs as root inside the sandbox.
	Root bool
}

// Launch is a harness's own configuration for one session, generated
// from the model connection.
type Launch struct {
	// Command, if set, replaces the launch table's command (an installed
	// harness resolved to absolute paths).
	Command []string
	// Files are written under Home before the harness starts: path
	// relative to Home → content.
	Files map[string]LaunchFile
	// Env is added to the harness environment.
	Env map[string]string
	// Mode, if set, is applied with session/set_mode (Claude's permission
	// mode, Codex's harnessMode).
	Mode string
	// Diagnose, if set, runs after each turn of the session that the
	// harness ended without an error; an error it returns fails the turn.
	// It is for harnesses that swallow failures (pi-acp ends a failed
	// model call with end_turn and no text; only its session file says
	// why).
	Diagnose func(ctx context.Context, in DiagnoseInput) error
	// Gateway, if set, is what the harness is told with ACP gateway
	// authentication (claude-agent-acp's "gateway" method) when its key
	// goes through the runner's key gateway: the base URL and key it
	// already has in Env, as the adapter's provider. Claude Code then
	// skips the `claude auth status` run it starts at initialize and at
	// every prompt (a second CLI boot, about 0.35 s of CPU, competing
	// with the turn's own CLI for the sandbox's cores).
	Gateway *agent.GatewayAuth
}

// claudeGatewayToken is the bearer token claude-agent-acp's gateway mode
// sends beside the headers it was given (its PROVIDER_AUTH_TOKEN_PLACEHOLDER).
const claudeGatewayToken = "acp-proxy"

// GatewayDrop is what the key gateway removes from a harness's requests
// when it authenticates over ACP (Launch.Gateway): claude-agent-acp's
// fixed bearer token, which the endpoint must not take for a credential.
func GatewayDrop(name string) map[string]string {
	if h, ok := Lookup(name); ok && h.Dir == "claude" {
		return map[string]string{"Authorization": "Bearer " + claudeGatewayToken}
	}
	return nil
}

// LaunchFile is one configuration file of a Launch.
type LaunchFile struct {
	Content []byte
	Mode    uint32
}

// DiagnoseInput is a finished turn, as Diagnose sees it.
type DiagnoseInput struct {
	// Sandbox is where the harness runs; Home is its session's $HOME there.
	Sandbox sandbox.Sandbox
	Home    string
	// AgentSessionID is the harness's own session id.
	AgentSessionID string
	StopReason     string
	// Output is the turn's agent text; ToolCalls counts its tool_call
	// events; Events are all of the turn's events so far.
	Output    string
	ToolCalls int
	Events    []wire.Event
}

// Configurer turns a request into a harness's own configuration. It
// returns a zero Launch for harnesses it does not know.
type Configurer func(ctx context.Context, s Setup) (Launch, error)

// Options are what NewConfigurer needs of the deployment.
type Options struct {
	// Dir is the runner's harness dir, where `runner harness install`
	// puts the built-in harnesses for the local provider.
	Dir string
	// Overrides are the operator's commands for built-in names
	// (AGENTA_RUNNER_HARNESS_CLAUDE=…), by harness name.
	Overrides map[string][]string
	// Images maps the providers whose sandboxes have the built-in
	// harnesses installed in their image (sandbox.HarnessImage) to the
	// prefix they are under.
	Images map[string]string
	// Getenv reads the runner's own environment, only for credentialMode
	// runtime_provided.
	Getenv func(string) string
}

// NewConfigurer turns each turn's request into the built-in harness's own
// configuration: the installed command (never npx), config files in the
// session's private home, env, and the ACP mode. An override of a
// built-in name replaces only the command: the harness is still
// configured from the request's modelConnection (base URL, key, model),
// else it would call its vendor's public API; a request without a
// modelConnection runs it as given. Names outside the catalogue run as
// configured, untouched.
func NewConfigurer(o Options) Configurer {
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return func(ctx context.Context, s Setup) (Launch, error) {
		override, custom := o.Overrides[s.Harness]
		if _, ok := Lookup(s.Harness); !ok || (custom && s.Request.ModelConnection == nil) {
			return Launch{}, nil
		}
		resolve := func(name string) ([]string, map[string]string, error) { return Resolve(o.Dir, name) }
		prefix, image := o.Images[s.Provider]
		switch {
		case custom:
			resolve = func(string) ([]string, map[string]string, error) { return override, nil, nil }
		case image:
			// Such sandboxes run the harnesses their image installed
			// (`runner daytona snapshot build`), not the host's.
			resolve = func(name string) ([]string, map[string]string, error) { return ImageCommand(prefix, name) }
		}
		argv, launchEnv, err := resolve(s.Harness)
		if err != nil {
			return Launch{}, err
		}
		mc, err := ModelConnFor(s.Harness, s.Request, s.Env, getenv)
		if err != nil {
			return Launch{}, err
		}
		// The local provider runs harnesses as the runner's own uid.
		root := s.Root || os.Geteuid() == 0
		hc, err := Configure(s.Harness, mc, Dirs{Home: s.Home, Root: root})
		if err != nil {
			return Launch{}, err
		}
		out := Launch{Command: argv, Env: map[string]string{}, Files: map[string]LaunchFile{}}
		maps.Copy(out.Env, launchEnv)
		maps.Copy(out.Env, hc.Env)
		for _, f := range hc.Files {
			out.Files[f.Path] = LaunchFile{Content: []byte(f.Content), Mode: uint32(f.Mode)}
		}
		if err := quirks(s, &out); err != nil {
			return Launch{}, err
		}
		return out, nil
	}
}

// quirks adds what each harness needs beyond its config files: the ACP
// mode it starts in, the check of turns it ends without saying why, Pi's
// built-in tools.
func quirks(s Setup, out *Launch) error {
	switch s.Harness {
	case "claude":
		out.Mode = ClaudeMode(s.Request.Permissions)
		if key, base := out.Env["ANTHROPIC_API_KEY"], out.Env["ANTHROPIC_BASE_URL"]; key != "" && base != "" {
			out.Gateway = &agent.GatewayAuth{BaseURL: base, Headers: map[string]string{"x-api-key": key}}
		}
	case "codex":
		mode := s.Request.HarnessMode
		if mode == "" {
			mode = "agent-full-access" // the contract's default for Codex
		}
		// codex-acp starts in this mode, so no set_mode round trip is
		// needed; Mode re-applies it if the adapter ignores the variable.
		out.Env["INITIAL_AGENT_MODE"] = mode
		out.Mode = mode
		out.Diagnose = codexDiagnose
	case "pi_core", "pi_agenta":
		out.Diagnose = piDiagnose(s.Harness)
		f, launcher, ok, err := piTools(s.Request.Tools, out.Env["PI_ACP_PI_COMMAND"], s.Home)
		if err != nil {
			return err
		}
		if ok {
			out.Files[piToolsFile] = f
			out.Env["PI_ACP_PI_COMMAND"] = launcher
		}
	}
	return nil
}

// ClaudeMode is Claude's permission mode for a request's policy.
// claude-agent-acp starts in "auto", which runs tools without asking and
// appends a billing note to the text; "default" asks over ACP for every
// tool that is not a read, so the runner's own gate decides. "allow" with
// no rules needs no gate: bypassPermissions skips the round trips (as
// root only with IS_SANDBOX=1, which Configure sets). "deny" stays in
// "default", where every such tool asks and the gate refuses it: the
// adapter's dontAsk mode, which would refuse without asking, made
// claude-agent-acp 0.101.0 exit when set (seen in the end-to-end test).
func ClaudeMode(p *wire.Permissions) string {
	if p != nil && len(p.Rules) == 0 && p.Default == "allow" {
		return "bypassPermissions"
	}
	return "default" // ask, allow_reads, deny, unset, or rules to apply
}
