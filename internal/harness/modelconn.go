package harness

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// ModelConnFor maps a request's modelConnection and model onto a harness
// model connection. Which provider wire API to call is decided from the
// provider and endpoint among the APIs the harness can call; the key is
// found among the materialised env by the provider's conventional variable
// names, or is the connection's single credential.
func ModelConnFor(name string, req *wire.Request, env map[string]string, getenv func(string) string) (ModelConn, error) {
	h, _ := Lookup(name)
	w := req.ModelConnection
	if w == nil {
		return ModelConn{}, errdefs.Invalidf(
			"modelConnection: harness %s needs one (provider, deployment, endpoint, credentials); the runner configures the harness from it", name)
	}
	model := req.Model
	if p, rest, ok := strings.Cut(model, "/"); ok && strings.EqualFold(p, w.Provider) {
		model = rest // "provider/id" names the connection's own provider
	}
	if model == "" {
		return ModelConn{}, errdefs.Invalidf("model: harness %s needs a model id for provider %s", name, w.Provider)
	}
	provider := strings.ToLower(strings.TrimSpace(w.Provider))
	switch dep := strings.ToLower(w.Deployment); dep {
	case "bedrock", "vertex", "azure":
		return ModelConn{}, errdefs.Unprocessablef(
			"modelConnection.deployment: %q is not supported for harness %s yet; use a direct or custom (OpenAI-, Anthropic- or Gemini-compatible) endpoint", dep, name)
	}
	baseURL := ""
	if w.Endpoint != nil {
		baseURL = strings.TrimSpace(w.Endpoint.BaseURL)
	}
	api, err := pickAPI(h, provider, baseURL)
	if err != nil {
		return ModelConn{}, err
	}
	base, err := normalizeBaseURL(api, baseURL)
	if err != nil {
		return ModelConn{}, err
	}
	keyEnv, key, err := findKey(api, provider, w, env, getenv)
	if err != nil {
		return ModelConn{}, fmt.Errorf("harness %s: %w", name, err)
	}
	return ModelConn{
		Provider: providerKey(provider),
		API:      api,
		BaseURL:  base,
		KeyEnv:   keyEnv,
		Key:      key,
		Model:    model,
	}, nil
}

func pickAPI(h Harness, provider, baseURL string) (API, error) {
	want := ProviderAPIs(provider, baseURL)
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

// normalizeBaseURL puts an endpoint in the form ModelConn takes:
// with the version for the OpenAI APIs (/v1 added to a bare host), the
// root for Anthropic and Gemini (a trailing /v1 or /v1beta dropped, the
// SDKs add it).
func normalizeBaseURL(api API, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errdefs.Invalidf("modelConnection.endpoint.baseUrl: %q is not an http(s) URL", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	switch api {
	case OpenAIChat, OpenAIResponses:
		if p == "" {
			p = "/v1"
		}
	case Anthropic:
		p = strings.TrimSuffix(p, "/v1")
	case Gemini:
		p = strings.TrimSuffix(strings.TrimSuffix(p, "/v1beta"), "/v1")
	}
	u.Path, u.RawPath = p, ""
	return strings.TrimRight(u.String(), "/"), nil
}

// keyVars are the conventional key variables of each API's providers.
var keyVars = map[API][]string{
	Anthropic:       {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_API_KEY"},
	Gemini:          {"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"},
	OpenAIChat:      {"OPENAI_API_KEY"},
	OpenAIResponses: {"OPENAI_API_KEY"},
}

// placeholderKey is given to harnesses that insist on a key when the
// connection has none (credentialMode none: a local Ollama or vLLM).
const placeholderKey = "no-key"

// findKey returns the variable that carries the API key and its value.
func findKey(api API, provider string, w *wire.ModelConnection, env map[string]string, getenv func(string) string) (string, string, error) {
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
