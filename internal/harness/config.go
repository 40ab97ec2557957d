package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
)

// API is a provider wire API.
type API string

const (
	OpenAIChat      API = "openai-chat"      // POST {base}/chat/completions
	OpenAIResponses API = "openai-responses" // POST {base}/responses
	Anthropic       API = "anthropic"        // POST {base}/v1/messages
	Gemini          API = "gemini"           // POST {base}/v1beta/models/{model}:streamGenerateContent
)

// ModelConn is the model connection a harness is configured for.
type ModelConn struct {
	// Provider names the connection in the harness's config (Pi's provider
	// key, so Pi lists the model as <Provider>/<Model>; Codex's provider
	// name). "runner" when empty.
	Provider string
	// API is the wire API the endpoint speaks.
	API API
	// BaseURL is the endpoint as that API's SDK takes it: for the OpenAI
	// APIs with the version (http://host:port/v1); for Anthropic and Gemini
	// the root (http://host:port), the SDK adds /v1 or /v1beta. Empty means
	// the provider's public endpoint.
	BaseURL string
	// KeyEnv is the environment variable that carries the key to harnesses
	// that read a configurable one (Codex, Pi); the API's usual name when
	// empty. Claude and Gemini read their fixed names.
	KeyEnv string
	// Key is the API key.
	Key string
	// Model is the model id as the endpoint knows it.
	Model string
}

// Dirs says where the harness runs, as the harness process sees it.
type Dirs struct {
	// Home is the session's private home dir (absolute). Config.Files are
	// relative to it, and HOME and the harness's config dir point into it.
	Home string
	// Root is true when the harness runs as uid 0 (Claude then needs
	// IS_SANDBOX=1).
	Root bool
}

// Config is a harness's configuration for one session.
type Config struct {
	// Files are written under Dirs.Home before the harness starts.
	Files []File
	// Env is added to the harness's environment. It holds the API key.
	Env map[string]string
}

// File is one config file.
type File struct {
	Path    string // relative to Dirs.Home, slash-separated
	Content string
	Mode    fs.FileMode
}

// Write writes c's files under home, creating directories as needed,
// without following a link in the way (tree.WriteFile): a link at a
// file's path is replaced, one among its parents refuses the write.
func (c Config) Write(home string) error {
	for _, f := range c.Files {
		if err := filetree.WriteFile(home, f.Path, strings.NewReader(f.Content), uint32(f.Mode.Perm()), 0o700, nil); err != nil {
			return fmt.Errorf("harness config %s: %w", home, err)
		}
	}
	return nil
}

// Environ returns base with c.Env added, replacing base's entries of the
// same names, in a stable order.
func (c Config) Environ(base []string) []string {
	out := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, ok := c.Env[k]
		return ok
	})
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+c.Env[k])
	}
	return out
}

// defaultKeyEnv is the usual key variable of each API.
var defaultKeyEnv = map[API]string{
	OpenAIChat:      "OPENAI_API_KEY",
	OpenAIResponses: "OPENAI_API_KEY",
	Anthropic:       "ANTHROPIC_API_KEY",
	Gemini:          "GEMINI_API_KEY",
}

// defaultBaseURL is each API's public endpoint, in BaseURL's form.
var defaultBaseURL = map[API]string{
	OpenAIChat:      "https://api.openai.com/v1",
	OpenAIResponses: "https://api.openai.com/v1",
	Anthropic:       "https://api.anthropic.com",
	Gemini:          "https://generativelanguage.googleapis.com",
}

func (mc ModelConn) keyEnv() string {
	if mc.KeyEnv != "" {
		return mc.KeyEnv
	}
	return defaultKeyEnv[mc.API]
}

func (mc ModelConn) baseURL() string {
	if mc.BaseURL != "" {
		return strings.TrimRight(mc.BaseURL, "/")
	}
	return defaultBaseURL[mc.API]
}

func (mc ModelConn) provider() string {
	if mc.Provider != "" {
		return mc.Provider
	}
	return "runner"
}

// Configure turns a model connection into name's own configuration, for a
// session whose private home is dirs.Home. It is a pure function: the
// caller writes Files (Config.Write) and adds Env. A connection whose API
// the harness cannot call, or that lacks a model, is an errdefs.ErrInvalid
// error.
func Configure(name string, mc ModelConn, dirs Dirs) (Config, error) {
	h, ok := Lookup(name)
	if !ok {
		return Config{}, errdefs.With(errdefs.ErrUnprocessable, unknown(name))
	}
	if !slices.Contains(h.APIs, mc.API) {
		var apis []string
		for _, a := range h.APIs {
			apis = append(apis, string(a))
		}
		return Config{}, errdefs.With(errdefs.ErrInvalid, fmt.Errorf(
			"harness %s cannot call the %q API (it calls %s)", name, mc.API, strings.Join(apis, ", ")))
	}
	if mc.Model == "" {
		return Config{}, errdefs.With(errdefs.ErrInvalid, fmt.Errorf("harness %s: the model connection names no model", name))
	}
	if k := mc.keyEnv(); !validEnvName(k) {
		return Config{}, errdefs.With(errdefs.ErrInvalid, fmt.Errorf("harness %s: key variable %q is not a valid environment variable name", name, k))
	}
	if !filepath.IsAbs(dirs.Home) {
		return Config{}, errdefs.With(errdefs.ErrInvalid, fmt.Errorf("harness %s: home dir %q is not absolute", name, dirs.Home))
	}
	switch h.Dir {
	case "claude":
		return claude(mc, dirs), nil
	case "codex":
		return codex(mc, dirs), nil
	case "pi":
		return pi(mc, dirs), nil
	case "gemini":
		return gemini(mc, dirs), nil
	case "opencode":
		return opencode(mc, dirs), nil
	}
	return Config{}, errdefs.With(errdefs.ErrUnprocessable, fmt.Errorf("harness %s has no configuration mapping", name))
}

// claude: no files; the adapter's claude reads everything from the
// environment. The model is pinned for every model tier, so side calls
// (title generation, prompt suggestions) go to the connection's model too.
func claude(mc ModelConn, dirs Dirs) Config {
	env := map[string]string{
		"HOME":                                     dirs.Home,
		"CLAUDE_CONFIG_DIR":                        filepath.Join(dirs.Home, ".claude"),
		"ANTHROPIC_API_KEY":                        mc.Key,
		"ANTHROPIC_MODEL":                          mc.Model,
		"ANTHROPIC_DEFAULT_OPUS_MODEL":             mc.Model,
		"ANTHROPIC_DEFAULT_SONNET_MODEL":           mc.Model,
		"ANTHROPIC_DEFAULT_HAIKU_MODEL":            mc.Model,
		"ANTHROPIC_SMALL_FAST_MODEL":               mc.Model,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_AUTOUPDATER":                      "1",
		"DISABLE_TELEMETRY":                        "1",
		"DISABLE_ERROR_REPORTING":                  "1",
		// claude retries a 5xx ten times with backoff, minutes in all;
		// two retries fail a dead endpoint in about 4 s.
		"CLAUDE_CODE_MAX_RETRIES": "2",
	}
	if mc.BaseURL != "" {
		env["ANTHROPIC_BASE_URL"] = mc.baseURL()
	}
	if dirs.Root {
		// As root, claude refuses --dangerously-skip-permissions (which
		// the adapter passes) unless it is told it runs in a sandbox.
		env["IS_SANDBOX"] = "1"
	}
	return Config{Env: env}
}

// codex: $CODEX_HOME/config.toml with one custom provider, and the key in
// the provider's env_key. Retries are off so a model error reaches the
// caller at once.
func codex(mc ModelConn, dirs Dirs) Config {
	var b strings.Builder
	kv := func(k, v string) { fmt.Fprintf(&b, "%s = %s\n", k, tomlString(v)) }
	kv("model", mc.Model)
	kv("model_provider", "runner")
	b.WriteString("check_for_update_on_startup = false\n")
	b.WriteString("\n[model_providers.runner]\n")
	kv("name", mc.provider())
	kv("base_url", mc.baseURL())
	kv("env_key", mc.keyEnv())
	kv("wire_api", "responses")
	b.WriteString("request_max_retries = 0\nstream_max_retries = 0\n")
	b.WriteString("\n[analytics]\nenabled = false\n")
	b.WriteString("\n[feedback]\nenabled = false\n")
	b.WriteString("\n[otel]\nexporter = \"none\"\n")
	codexHome := filepath.Join(dirs.Home, ".codex")
	return Config{
		Files: []File{{Path: ".codex/config.toml", Content: b.String(), Mode: 0o600}},
		Env: map[string]string{
			"HOME":       dirs.Home,
			"CODEX_HOME": codexHome,
			mc.keyEnv():  mc.Key,
			"NO_BROWSER": "1",
		},
	}
}

// piAPI is Pi's name for each API.
var piAPI = map[API]string{
	OpenAIChat:      "openai-completions",
	OpenAIResponses: "openai-responses",
	Anthropic:       "anthropic-messages",
	Gemini:          "google-generative-ai",
}

// pi: models.json and settings.json in its agent dir. models.json names
// the key variable, not the key: Pi reads an apiKey that names a set
// variable from the environment.
func pi(mc ModelConn, dirs Dirs) Config {
	base := mc.baseURL()
	if mc.API == Gemini {
		base += "/v1beta" // Pi's Google provider takes the versioned URL
	}
	provider := map[string]any{
		"baseUrl": base,
		"api":     piAPI[mc.API],
		"apiKey":  mc.keyEnv(),
		"models": []any{map[string]any{
			"id": mc.Model, "name": mc.Model, "contextWindow": 128000, "maxTokens": 4096,
		}},
	}
	if mc.API == OpenAIChat {
		provider["compat"] = map[string]any{"supportsDeveloperRole": false, "supportsReasoningEffort": false}
	}
	models := map[string]any{"providers": map[string]any{mc.provider(): provider}}
	settings := map[string]any{
		"defaultProvider":        mc.provider(),
		"defaultModel":           mc.Model,
		"quietStartup":           true,
		"enableInstallTelemetry": false,
		"defaultThinkingLevel":   "off",
	}
	agentDir := filepath.Join(dirs.Home, ".pi", "agent")
	return Config{
		Files: []File{
			{Path: ".pi/agent/models.json", Content: jsonText(models), Mode: 0o600},
			{Path: ".pi/agent/settings.json", Content: jsonText(settings), Mode: 0o600},
		},
		Env: map[string]string{
			"HOME":                  dirs.Home,
			"PI_CODING_AGENT_DIR":   agentDir,
			"PI_OFFLINE":            "1",
			"PI_SKIP_VERSION_CHECK": "1",
			"PI_TELEMETRY":          "0",
			mc.keyEnv():             mc.Key,
		},
	}
}

// gemini: $HOME/.gemini/settings.json picks API-key auth and the model,
// turns off updates, usage statistics, telemetry, checkpointing and folder
// trust, and bounds retries (10 by default, minutes on a 5xx; 3 take about
// 14 s). GEMINI_CLI_NO_RELAUNCH keeps gemini from re-spawning itself with
// a bigger heap, one node start instead of two.
func gemini(mc ModelConn, dirs Dirs) Config {
	settings := map[string]any{
		"general": map[string]any{
			"enableAutoUpdate": false, "enableAutoUpdateNotification": false,
			"checkpointing": map[string]any{"enabled": false},
			"maxAttempts":   3,
		},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"security": map[string]any{
			"auth":        map[string]any{"selectedType": "gemini-api-key"},
			"folderTrust": map[string]any{"enabled": false},
		},
		"model": map[string]any{"name": mc.Model},
	}
	env := map[string]string{
		"HOME":                     dirs.Home,
		"GEMINI_API_KEY":           mc.Key,
		"GEMINI_TELEMETRY_ENABLED": "false",
		"GEMINI_CLI_NO_RELAUNCH":   "true",
	}
	if mc.BaseURL != "" {
		// Gemini CLI takes http:// here only for localhost and 127.0.0.1.
		env["GOOGLE_GEMINI_BASE_URL"] = mc.baseURL()
	}
	return Config{
		Files: []File{{Path: ".gemini/settings.json", Content: jsonText(settings), Mode: 0o600}},
		Env:   env,
	}
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// opencodeSDK is the AI-SDK provider package opencode uses for each API,
// and the path its baseURL adds to BaseURL. opencode bundles these, so
// none is fetched at run time.
var opencodeSDK = map[API][2]string{
	OpenAIChat:      {"@ai-sdk/openai-compatible", ""},
	OpenAIResponses: {"@ai-sdk/openai", ""},
	Anthropic:       {"@ai-sdk/anthropic", "/v1"},
	Gemini:          {"@ai-sdk/google", "/v1beta"},
}

// opencodeBuiltin are provider ids opencode treats specially.
var opencodeBuiltin = map[string]bool{
	"openai": true, "anthropic": true, "google": true, "google-vertex": true, "azure": true,
	"amazon-bedrock": true, "openrouter": true, "github-copilot": true, "opencode": true, "vercel": true,
}

// opencode: $HOME/.config/opencode/opencode.json with one provider and
// the key as an {env:…} reference; the environment turns off update
// checks, the models.dev fetch (opencode then knows only the configured
// model), LSP downloads and sharing.
func opencode(mc ModelConn, dirs Dirs) Config {
	sdk := opencodeSDK[mc.API]
	id := mc.provider()
	if opencodeBuiltin[id] {
		// opencode gives its own providers custom loaders (openai is
		// called through .responses()), which break a configured SDK.
		id = "runner-" + id
	}
	cfg := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
		// opencode runs every tool unasked by default; asking sends a
		// session/request_permission, so the runner's policy decides.
		"permission": map[string]any{"edit": "ask", "bash": "ask", "webfetch": "ask"},
		"model":      id + "/" + mc.Model,
		"provider": map[string]any{id: map[string]any{
			"npm":  sdk[0],
			"name": mc.provider(),
			"options": map[string]any{
				"baseURL": mc.baseURL() + sdk[1],
				"apiKey":  "{env:" + mc.keyEnv() + "}",
			},
			"models": map[string]any{mc.Model: map[string]any{"name": mc.Model, "tool_call": true}},
		}},
	}
	return Config{
		Files: []File{{Path: ".config/opencode/opencode.json", Content: jsonText(cfg), Mode: 0o600}},
		Env: map[string]string{
			"HOME":                          dirs.Home,
			"XDG_CONFIG_HOME":               filepath.Join(dirs.Home, ".config"),
			"XDG_DATA_HOME":                 filepath.Join(dirs.Home, ".local", "share"),
			"XDG_STATE_HOME":                filepath.Join(dirs.Home, ".local", "state"),
			"XDG_CACHE_HOME":                filepath.Join(dirs.Home, ".cache"),
			"OPENCODE_DISABLE_AUTOUPDATE":   "1",
			"OPENCODE_DISABLE_MODELS_FETCH": "1",
			"OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
			"OPENCODE_DISABLE_SHARE":        "1",
			mc.keyEnv():                     mc.Key,
		},
	}
}

// jsonText renders v as indented JSON without HTML escaping.
func jsonText(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(err) // built from maps, slices and strings only
	}
	return buf.String()
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
