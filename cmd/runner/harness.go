package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// harnessConfigurer turns each turn's request into the built-in harness's
// own configuration: the installed command (never npx), config files in
// the session's private home, env, and the ACP mode. An override of a
// built-in name (AGENTA_RUNNER_HARNESS_CLAUDE=…) replaces only the
// command: the harness is still configured from the request's
// modelConnection (base URL, key, model), else it would call its vendor's
// public API; a request without a modelConnection runs it as given.
// Names outside the catalogue run as configured, untouched. environ is
// the runner's own environment, read only for credentialMode
// runtime_provided.
func harnessConfigurer(cfg config.Config, environ []string) runner.Configurer {
	getenv := envLookup(environ)
	return func(ctx context.Context, s runner.HarnessSetup) (runner.HarnessConfig, error) {
		h, ok := cfg.Harnesses[s.Harness]
		if !ok || (h.Custom && s.Request.ModelConnection == nil) {
			return runner.HarnessConfig{}, nil
		}
		if _, ok := harness.Lookup(s.Harness); !ok {
			return runner.HarnessConfig{}, nil
		}
		resolve := func(name string) ([]string, map[string]string, error) { return harness.Resolve(cfg.HarnessDir, name) }
		switch {
		case h.Custom:
			resolve = func(string) ([]string, map[string]string, error) { return h.Command, nil, nil }
		case s.Provider == "daytona":
			// Remote sandboxes run the harnesses the snapshot installed
			// (`runner daytona snapshot build`), not the host's.
			resolve = daytonaHarnessCommand
		}
		argv, launchEnv, err := resolve(s.Harness)
		if err != nil {
			return runner.HarnessConfig{}, err
		}
		mc, err := modelConn(s.Harness, s.Request, s.Env, getenv)
		if err != nil {
			return runner.HarnessConfig{}, err
		}
		// The local provider runs harnesses as the runner's own uid.
		root := s.Root || os.Geteuid() == 0
		hc, err := harness.Configure(s.Harness, mc, harness.Dirs{Home: s.Home, Root: root})
		if err != nil {
			return runner.HarnessConfig{}, err
		}
		out := runner.HarnessConfig{Command: argv, Env: map[string]string{}, Files: map[string]runner.HarnessFile{}}
		for k, v := range launchEnv {
			out.Env[k] = v
		}
		for k, v := range hc.Env {
			out.Env[k] = v
		}
		for _, f := range hc.Files {
			out.Files[f.Path] = runner.HarnessFile{Content: []byte(f.Content), Mode: uint32(f.Mode)}
		}
		switch s.Harness {
		case "claude":
			out.Mode = claudeMode(s.Request.Permissions)
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
				return runner.HarnessConfig{}, err
			}
			if ok {
				out.Files[piToolsFile] = f
				out.Env["PI_ACP_PI_COMMAND"] = launcher
			}
		}
		return out, nil
	}
}

// claudeMode is Claude's permission mode for a request's policy.
// claude-agent-acp starts in "auto", which runs tools without asking and
// appends a billing note to the text; "default" asks over ACP for every
// tool that is not a read, so the runner's own gate decides. "allow" with
// no rules needs no gate: bypassPermissions skips the round trips (as
// root only with IS_SANDBOX=1, which Configure sets). "deny" stays in
// "default", where every such tool asks and the gate refuses it: the
// adapter's dontAsk mode, which would refuse without asking, made
// claude-agent-acp 0.101.0 exit when set (seen in the end-to-end test).
func claudeMode(p *wire.Permissions) string {
	if p != nil && len(p.Rules) == 0 && p.Default == "allow" {
		return "bypassPermissions"
	}
	return "default" // ask, allow_reads, deny, unset, or rules to apply
}

// modelConn maps a request's modelConnection and model onto a harness
// model connection. Which provider wire API to call is decided from the
// provider and endpoint among the APIs the harness can call; the key is
// found among the materialised env by the provider's conventional variable
// names, or is the connection's single credential.
func modelConn(name string, req *wire.Request, env map[string]string, getenv func(string) string) (harness.ModelConn, error) {
	h, _ := harness.Lookup(name)
	w := req.ModelConnection
	if w == nil {
		return harness.ModelConn{}, errdefs.Invalidf(
			"modelConnection: harness %s needs one (provider, deployment, endpoint, credentials); the runner configures the harness from it", name)
	}
	model := req.Model
	if p, rest, ok := strings.Cut(model, "/"); ok && strings.EqualFold(p, w.Provider) {
		model = rest // "provider/id" names the connection's own provider
	}
	if model == "" {
		return harness.ModelConn{}, errdefs.Invalidf("model: harness %s needs a model id for provider %s", name, w.Provider)
	}
	provider := strings.ToLower(strings.TrimSpace(w.Provider))
	switch dep := strings.ToLower(w.Deployment); dep {
	case "bedrock", "vertex", "azure":
		return harness.ModelConn{}, errdefs.Unprocessablef(
			"modelConnection.deployment: %q is not supported for harness %s yet; use a direct or custom (OpenAI-, Anthropic- or Gemini-compatible) endpoint", dep, name)
	}
	baseURL := ""
	if w.Endpoint != nil {
		baseURL = strings.TrimSpace(w.Endpoint.BaseURL)
	}
	api, err := pickAPI(h, provider, baseURL)
	if err != nil {
		return harness.ModelConn{}, err
	}
	base, err := normalizeBaseURL(api, baseURL)
	if err != nil {
		return harness.ModelConn{}, err
	}
	keyEnv, key, err := findKey(api, provider, w, env, getenv)
	if err != nil {
		return harness.ModelConn{}, fmt.Errorf("harness %s: %w", name, err)
	}
	return harness.ModelConn{
		Provider: providerKey(provider),
		API:      api,
		BaseURL:  base,
		KeyEnv:   keyEnv,
		Key:      key,
		Model:    model,
	}, nil
}

func pickAPI(h harness.Harness, provider, baseURL string) (harness.API, error) {
	want := harness.ProviderAPIs(provider, baseURL)
	for _, a := range want {
		if slices.Contains(h.APIs, a) {
			return a, nil
		}
	}
	var can, speaks []string
	for _, a := range h.APIs {
		can = append(can, string(a))
	}
	for _, a := range want {
		speaks = append(speaks, string(a))
	}
	return "", errdefs.Unprocessablef("modelConnection.provider: harness %s calls %s, and provider %q speaks %s; pick a harness or a provider that match",
		h.Name, strings.Join(can, ", "), provider, strings.Join(speaks, ", "))
}

// normalizeBaseURL puts an endpoint in the form harness.ModelConn takes:
// with the version for the OpenAI APIs (/v1 added to a bare host), the
// root for Anthropic and Gemini (a trailing /v1 or /v1beta dropped, the
// SDKs add it).
func normalizeBaseURL(api harness.API, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errdefs.Invalidf("modelConnection.endpoint.baseUrl: %q is not an http(s) URL", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	switch api {
	case harness.OpenAIChat, harness.OpenAIResponses:
		if p == "" {
			p = "/v1"
		}
	case harness.Anthropic:
		p = strings.TrimSuffix(p, "/v1")
	case harness.Gemini:
		p = strings.TrimSuffix(strings.TrimSuffix(p, "/v1beta"), "/v1")
	}
	u.Path, u.RawPath = p, ""
	return strings.TrimRight(u.String(), "/"), nil
}

// keyVars are the conventional key variables of each API's providers.
var keyVars = map[harness.API][]string{
	harness.Anthropic:       {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_API_KEY"},
	harness.Gemini:          {"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"},
	harness.OpenAIChat:      {"OPENAI_API_KEY"},
	harness.OpenAIResponses: {"OPENAI_API_KEY"},
}

// placeholderKey is given to harnesses that insist on a key when the
// connection has none (credentialMode none: a local Ollama or vLLM).
const placeholderKey = "no-key"

// findKey returns the variable that carries the API key and its value.
func findKey(api harness.API, provider string, w *wire.ModelConnection, env map[string]string, getenv func(string) string) (string, string, error) {
	names := slices.Clone(keyVars[api])
	if p := envName(provider); p != "" {
		names = append([]string{p + "_API_KEY"}, names...)
	}
	mode := w.CredentialMode
	if mode == "" && len(w.Credentials) == 0 {
		mode = "none"
	}
	switch mode {
	case "none":
		return "", placeholderKey, nil
	case "runtime_provided":
		// The runner's operator holds the key in the runner's environment.
		for _, n := range names {
			if v := getenv(n); v != "" {
				return n, v, nil
			}
		}
		return "", "", errdefs.Invalidf("modelConnection: credentialMode runtime_provided, but none of %s is set in the runner's environment", strings.Join(names, ", "))
	}
	for _, n := range names {
		if v := env[n]; v != "" {
			return n, v, nil
		}
	}
	if len(w.Credentials) == 1 {
		n := w.Credentials[0].Binding.Name
		return n, env[n], nil
	}
	var bound []string
	for _, c := range w.Credentials {
		bound = append(bound, c.Binding.Name)
	}
	return "", "", errdefs.Invalidf("modelConnection.credentials: cannot tell the API key among %s; bind it as one of %s",
		strings.Join(bound, ", "), strings.Join(names, ", "))
}

// envName upper-cases a provider id into a variable name prefix
// ("openrouter" → OPENROUTER), or "" when it has other characters.
func envName(provider string) string {
	s := strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(provider))
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return ""
	}
	for _, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return ""
		}
	}
	return s
}

// providerKey is the connection's name in the harness's config (Pi lists
// the model as <key>/<model>): the provider id reduced to safe characters.
func providerKey(provider string) string {
	var b strings.Builder
	for _, r := range provider {
		if r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// piDiagnose fails a Pi turn that ended with no text and no tool call
// when Pi's own session file says the model call failed: pi-acp 0.0.24
// ends such a turn with end_turn and drops the error.
func piDiagnose(name string) func(context.Context, runner.DiagnoseInput) error {
	return func(ctx context.Context, in runner.DiagnoseInput) error {
		if in.Output != "" || in.ToolCalls > 0 || in.AgentSessionID == "" {
			return nil
		}
		msg, err := piLastError(ctx, in.Sandbox, in.Home, in.AgentSessionID)
		if err != nil || msg == "" {
			return nil // nothing to add: the turn stands as the harness ended it
		}
		return fmt.Errorf("harness %s: %s", name, msg)
	}
}

// codexDiagnose fails a Codex turn whose thread ended in a system error:
// codex-acp 2.6 (to a client without JetBrains' typed session failures)
// streams the provider's error body as agent text and ends the turn with
// end_turn; the only other sign is a session_info_update whose
// _meta.codex.threadStatus is systemError. The error is the text.
func codexDiagnose(_ context.Context, in runner.DiagnoseInput) error {
	status := ""
	for _, ev := range in.Events {
		if ev.Type != wire.EventData || ev.Name != "acp.session_info_update" {
			continue
		}
		var u struct {
			Meta struct {
				Codex struct {
					ThreadStatus *struct {
						Type string `json:"type"`
					} `json:"threadStatus"`
				} `json:"codex"`
			} `json:"_meta"`
		}
		b, err := json.Marshal(ev.Data)
		if err != nil || json.Unmarshal(b, &u) != nil || u.Meta.Codex.ThreadStatus == nil {
			continue
		}
		status = u.Meta.Codex.ThreadStatus.Type
	}
	if status != "systemError" {
		return nil
	}
	msg := strings.TrimSpace(in.Output)
	if msg == "" {
		msg = "the turn failed (thread status systemError) without a message"
	}
	return fmt.Errorf("harness codex: %s", msg)
}

// piSessionTail is how much of the end of Pi's session file is read: the
// last assistant message is near the end.
const piSessionTail = 256 << 10

// piLastError reads the end of Pi's session file inside the sandbox (a
// process, so it works where the sandbox's files are not on the runner's
// host) and returns the errorMessage of its last assistant message.
func piLastError(ctx context.Context, sb sandbox.Sandbox, home, sessionID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dir := path.Join(home, ".pi", "agent", "sessions")
	p, err := sb.Start(ctx, sandbox.Cmd{
		Path: "/bin/sh",
		Args: []string{"-c", `for f in "$1"/*/*_"$2".jsonl; do [ -f "$f" ] && tail -c "$3" "$f"; done`, "sh", dir, sessionID, fmt.Sprint(piSessionTail)},
		Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"},
	})
	if err != nil {
		return "", err
	}
	_ = p.Stdin().Close()
	b, rerr := io.ReadAll(io.LimitReader(p.Stdout(), piSessionTail+1))
	if werr := p.Wait(); werr != nil || rerr != nil {
		return "", errors.Join(werr, rerr)
	}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), piSessionTail+1)
	for sc.Scan() {
		var e struct {
			Message struct {
				Role         string `json:"role"`
				StopReason   string `json:"stopReason"`
				ErrorMessage string `json:"errorMessage"`
			} `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Message.Role == "assistant" {
			last = e.Message.ErrorMessage // a partial first line fails to parse and is skipped
		}
	}
	return last, nil
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

// harnessCmd is `runner harness install <name>…` and `runner harness list`.
func harnessCmd(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) int {
	help := "usage: runner harness install <name>… | runner harness install all | runner harness list [--json]\n" +
		"Harnesses install with npm, at pinned versions, into AGENTA_RUNNER_HARNESS_DIR (default <data dir>/harnesses).\n" +
		"Installable: " + strings.Join(harness.Names(), ", ") + "\n"
	if len(args) == 0 {
		fmt.Fprint(stderr, help)
		return 2
	}
	if wantsHelp(args[:1]) || (args[0] == "install" && wantsHelp(args[1:])) {
		fmt.Fprint(stdout, help)
		return 0
	}
	cfg, ok := loadConfig(environ, stderr)
	if !ok && !wantsHelp(args[1:]) {
		return 2
	}
	switch args[0] {
	case "install":
		names := args[1:]
		if len(names) == 0 {
			fmt.Fprintf(stderr, "runner harness install: name one or more of %s (or all)\n", strings.Join(harness.Names(), ", "))
			return 2
		}
		if len(names) == 1 && names[0] == "all" {
			names = harness.Names()
		}
		if err := harness.Install(ctx, cfg.HarnessDir, names, stderr); err != nil {
			fmt.Fprintln(stderr, "runner harness install:", err)
			return 1
		}
		return 0
	case "list":
		fs := flag.NewFlagSet("runner harness list", flag.ContinueOnError)
		fs.SetOutput(stderr)
		asJSON := fs.Bool("json", false, "print JSON")
		if code, ok := parseFlags(fs, args[1:], stdout); !ok {
			return code
		}
		list := harness.List(cfg.HarnessDir)
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(list)
			return 0
		}
		fmt.Fprintf(stdout, "harness dir: %s\n", cfg.HarnessDir)
		for _, in := range list {
			state := "not installed"
			if in.Installed {
				state = "installed"
			}
			if h, ok := cfg.Harnesses[in.Name]; ok && h.Custom {
				state += "; overridden by AGENTA_RUNNER_HARNESS_" + strings.ToUpper(in.Name) + ": " + strings.Join(h.Command, " ")
			}
			fmt.Fprintf(stdout, "%-10s %s\n", in.Name, state)
			for _, p := range in.Packages {
				have := p.Version
				if have == "" {
					have = "missing"
				}
				fmt.Fprintf(stdout, "  %s@%s (found: %s)\n", p.Name, p.Want, have)
			}
			if in.Installed {
				fmt.Fprintf(stdout, "  command: %s\n", strings.Join(in.Command, " "))
			} else {
				fmt.Fprintf(stdout, "  install: runner harness install %s\n", in.Name)
			}
		}
		return 0
	}
	fmt.Fprintf(stderr, "runner harness: unknown subcommand %q\n%s", args[0], help)
	return 2
}

// harnessStatusCache keeps harnessStatus for a second: /health is polled
// (load balancers, probes, platforms before each turn), and reading every
// harness's package.json each time was most of its cost. An install by
// another process shows within the second.
type harnessStatusCache struct {
	status func() map[string]any // harnessStatus
	now    func() time.Time

	mu sync.Mutex
	at time.Time
	v  map[string]any // never modified once cached
}

func (c *harnessStatusCache) get() map[string]any {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.v == nil || now.Sub(c.at) >= time.Second || now.Before(c.at) {
		c.v, c.at = c.status(), now
	}
	return c.v
}

// harnessStatus is what /health reports on the launch table: for each
// harness whether it can start (installed at its pinned versions, or a
// custom command), and its version.
func harnessStatus(cfg config.Config) map[string]any {
	installed := map[string]harness.Installed{}
	for _, in := range harness.List(cfg.HarnessDir) {
		installed[in.Name] = in
	}
	out := map[string]any{}
	for _, name := range cfg.HarnessNames() {
		h := cfg.Harnesses[name]
		in, builtin := installed[name]
		switch {
		case h.Custom || !builtin:
			out[name] = map[string]any{"installed": true, "source": "custom"}
		case in.Installed:
			out[name] = map[string]any{"installed": true, "source": "harness_dir", "version": in.Packages[0].Version}
		default:
			out[name] = map[string]any{"installed": false, "source": "harness_dir", "install": "runner harness install " + name}
		}
	}
	return out
}
