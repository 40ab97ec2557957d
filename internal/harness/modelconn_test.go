package harness

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

func TestModelConn(t *testing.T) {
	cred := func(name, value string) []wire.Credential {
		return []wire.Credential{{Binding: wire.Binding{Kind: "environment", Name: name}, Value: value, Usage: "opaque_http"}}
	}
	runnerEnv := map[string]string{"ANTHROPIC_API_KEY": "from-runner"}
	tests := []struct {
		name    string
		harness string
		req     wire.Request
		env     map[string]string
		want    ModelConn
	}{
		{
			name: "claude on anthropic, provider/id model, /v1 dropped", harness: "claude",
			req: wire.Request{Model: "anthropic/claude-x", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "direct",
				Endpoint: &wire.Endpoint{BaseURL: "https://gw.example/anthropic/v1/"}, Credentials: cred("ANTHROPIC_API_KEY", "k")}},
			env:  map[string]string{"ANTHROPIC_API_KEY": "k"},
			want: ModelConn{Provider: "anthropic", API: Anthropic, BaseURL: "https://gw.example/anthropic", KeyEnv: "ANTHROPIC_API_KEY", Key: "k", Model: "claude-x"},
		},
		{
			name: "pi on ollama: chat completions, /v1 added, no key", harness: "pi_core",
			req:  wire.Request{Model: "qwen3:8b", ModelConnection: &wire.ModelConnection{Provider: "ollama", Deployment: "custom", Endpoint: &wire.Endpoint{BaseURL: "http://127.0.0.1:11434"}}},
			env:  map[string]string{},
			want: ModelConn{Provider: "ollama", API: OpenAIChat, BaseURL: "http://127.0.0.1:11434/v1", Key: placeholderKey, Model: "qwen3:8b"},
		},
		{
			name: "pi on openai direct: responses", harness: "pi_core",
			req:  wire.Request{Model: "gpt-5.5", ModelConnection: &wire.ModelConnection{Provider: "openai", Deployment: "direct", Credentials: cred("OPENAI_API_KEY", "sk")}},
			env:  map[string]string{"OPENAI_API_KEY": "sk"},
			want: ModelConn{Provider: "openai", API: OpenAIResponses, KeyEnv: "OPENAI_API_KEY", Key: "sk", Model: "gpt-5.5"},
		},
		{
			name: "openrouter keeps its slashed model id; the single credential is the key", harness: "pi_core",
			req: wire.Request{Model: "anthropic/claude-x", ModelConnection: &wire.ModelConnection{Provider: "openrouter", Deployment: "custom",
				Endpoint: &wire.Endpoint{BaseURL: "https://openrouter.ai/api/v1"}, Credentials: cred("MY_KEY", "or")}},
			env:  map[string]string{"MY_KEY": "or"},
			want: ModelConn{Provider: "openrouter", API: OpenAIChat, BaseURL: "https://openrouter.ai/api/v1", KeyEnv: "MY_KEY", Key: "or", Model: "anthropic/claude-x"},
		},
		{
			name: "codex on a vLLM endpoint: responses, the only API it calls", harness: "codex",
			req:  wire.Request{Model: "m", ModelConnection: &wire.ModelConnection{Provider: "vllm", Deployment: "custom", Endpoint: &wire.Endpoint{BaseURL: "http://10.0.0.5:8000/v1"}, CredentialMode: "none"}},
			env:  map[string]string{},
			want: ModelConn{Provider: "vllm", API: OpenAIResponses, BaseURL: "http://10.0.0.5:8000/v1", Key: placeholderKey, Model: "m"},
		},
		{
			name: "gemini refuses an anthropic connection", harness: "gemini",
			req: wire.Request{Model: "gemini-2.5-flash", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "direct", CredentialMode: "runtime_provided"}},
			env: map[string]string{},
		},
		{
			name: "claude, runtime-provided key", harness: "claude",
			req:  wire.Request{Model: "claude-x", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "direct", CredentialMode: "runtime_provided"}},
			env:  map[string]string{},
			want: ModelConn{Provider: "anthropic", API: Anthropic, KeyEnv: "ANTHROPIC_API_KEY", Key: "from-runner", Model: "claude-x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ModelConnFor(tt.harness, &tt.req, tt.env, func(k string) string { return runnerEnv[k] })
			if tt.want == (ModelConn{}) {
				if !errors.Is(err, errdefs.ErrUnprocessable) || !strings.Contains(err.Error(), "harness gemini calls gemini") {
					t.Fatalf("err %v, want a refusal naming what the harness calls", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestModelConnRefuses(t *testing.T) {
	two := []wire.Credential{
		{Binding: wire.Binding{Kind: "environment", Name: "A"}, Value: "a", Usage: "local_use"},
		{Binding: wire.Binding{Kind: "environment", Name: "B"}, Value: "b", Usage: "local_use"},
	}
	tests := []struct {
		name string
		req  wire.Request
		want string
		is   error
	}{
		{"no connection", wire.Request{Model: "m"}, "modelConnection: harness claude needs one", errdefs.ErrInvalid},
		{"no model", wire.Request{ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "direct"}}, "model: harness claude needs a model id", errdefs.ErrInvalid},
		{"bedrock", wire.Request{Model: "m", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "bedrock"}}, `"bedrock" is not supported`, errdefs.ErrUnprocessable},
		{"openai for claude", wire.Request{Model: "m", ModelConnection: &wire.ModelConnection{Provider: "openai", Deployment: "direct"}}, "harness claude calls anthropic", errdefs.ErrUnprocessable},
		{"which key", wire.Request{Model: "m", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "direct", Credentials: two}}, "cannot tell the API key among A, B", errdefs.ErrInvalid},
		{"bad url", wire.Request{Model: "m", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "custom", Endpoint: &wire.Endpoint{BaseURL: "ftp://x"}}}, "is not an http(s) URL", errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ModelConnFor("claude", &tt.req, map[string]string{"A": "a", "B": "b"}, func(string) string { return "" })
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, tt.is) {
				t.Fatalf("err %v, want %q of class %v", err, tt.want, tt.is)
			}
		})
	}
}

func TestClaudeMode(t *testing.T) {
	tests := []struct {
		p    *wire.Permissions
		want string
	}{
		{nil, "default"},
		{&wire.Permissions{Default: "ask"}, "default"},
		{&wire.Permissions{Default: "allow_reads"}, "default"},
		{&wire.Permissions{Default: "allow"}, "bypassPermissions"},
		{&wire.Permissions{Default: "deny"}, "default"},
		// With rules, every call must reach the runner's gate.
		{&wire.Permissions{Default: "allow", Rules: []wire.PermissionRule{{Pattern: "Bash", Permission: "ask"}}}, "default"},
	}
	for _, tt := range tests {
		if got := ClaudeMode(tt.p); got != tt.want {
			t.Errorf("ClaudeMode(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

// TestClaudeGatewayAuth: Claude is given its base URL and key again for
// ACP gateway authentication, and the key gateway drops the bearer the
// adapter adds in that mode; other harnesses get neither.
func TestClaudeGatewayAuth(t *testing.T) {
	s := Setup{Harness: "claude", Request: &wire.Request{}}
	out := Launch{Env: map[string]string{"ANTHROPIC_API_KEY": "runner-key-1", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1/g/t"}}
	if err := quirks(s, &out); err != nil {
		t.Fatal(err)
	}
	if g := out.Gateway; g == nil || g.BaseURL != "http://127.0.0.1:1/g/t" || g.Headers["x-api-key"] != "runner-key-1" || len(g.Headers) != 1 {
		t.Errorf("Gateway = %+v, want the base URL and the key as x-api-key", out.Gateway)
	}
	if d := GatewayDrop("claude"); d["Authorization"] != "Bearer acp-proxy" {
		t.Errorf("GatewayDrop(claude) = %v", d)
	}
	noKey := Launch{Env: map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}}
	if err := quirks(s, &noKey); err != nil || noKey.Gateway != nil {
		t.Errorf("without a key: Gateway = %+v (%v), want none", noKey.Gateway, err)
	}
	if GatewayDrop("pi_core") != nil {
		t.Errorf("GatewayDrop(pi_core) is not empty")
	}
}
