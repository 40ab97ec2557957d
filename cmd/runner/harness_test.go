package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
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
		want    harness.ModelConn
	}{
		{
			name: "claude on anthropic, provider/id model, /v1 dropped", harness: "claude",
			req: wire.Request{Model: "anthropic/claude-x", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "direct",
				Endpoint: &wire.Endpoint{BaseURL: "https://gw.example/anthropic/v1/"}, Credentials: cred("ANTHROPIC_API_KEY", "k")}},
			env:  map[string]string{"ANTHROPIC_API_KEY": "k"},
			want: harness.ModelConn{Provider: "anthropic", API: harness.Anthropic, BaseURL: "https://gw.example/anthropic", KeyEnv: "ANTHROPIC_API_KEY", Key: "k", Model: "claude-x"},
		},
		{
			name: "pi on ollama: chat completions, /v1 added, no key", harness: "pi_core",
			req:  wire.Request{Model: "qwen3:8b", ModelConnection: &wire.ModelConnection{Provider: "ollama", Deployment: "custom", Endpoint: &wire.Endpoint{BaseURL: "http://127.0.0.1:11434"}}},
			env:  map[string]string{},
			want: harness.ModelConn{Provider: "ollama", API: harness.OpenAIChat, BaseURL: "http://127.0.0.1:11434/v1", Key: placeholderKey, Model: "qwen3:8b"},
		},
		{
			name: "pi on openai direct: responses", harness: "pi_core",
			req:  wire.Request{Model: "gpt-5.5", ModelConnection: &wire.ModelConnection{Provider: "openai", Deployment: "direct", Credentials: cred("OPENAI_API_KEY", "sk")}},
			env:  map[string]string{"OPENAI_API_KEY": "sk"},
			want: harness.ModelConn{Provider: "openai", API: harness.OpenAIResponses, KeyEnv: "OPENAI_API_KEY", Key: "sk", Model: "gpt-5.5"},
		},
		{
			name: "openrouter keeps its slashed model id; the single credential is the key", harness: "pi_core",
			req: wire.Request{Model: "anthropic/claude-x", ModelConnection: &wire.ModelConnection{Provider: "openrouter", Deployment: "custom",
				Endpoint: &wire.Endpoint{BaseURL: "https://openrouter.ai/api/v1"}, Credentials: cred("MY_KEY", "or")}},
			env:  map[string]string{"MY_KEY": "or"},
			want: harness.ModelConn{Provider: "openrouter", API: harness.OpenAIChat, BaseURL: "https://openrouter.ai/api/v1", KeyEnv: "MY_KEY", Key: "or", Model: "anthropic/claude-x"},
		},
		{
			name: "codex on a vLLM endpoint: responses, the only API it calls", harness: "codex",
			req:  wire.Request{Model: "m", ModelConnection: &wire.ModelConnection{Provider: "vllm", Deployment: "custom", Endpoint: &wire.Endpoint{BaseURL: "http://10.0.0.5:8000/v1"}, CredentialMode: "none"}},
			env:  map[string]string{},
			want: harness.ModelConn{Provider: "vllm", API: harness.OpenAIResponses, BaseURL: "http://10.0.0.5:8000/v1", Key: placeholderKey, Model: "m"},
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
			want: harness.ModelConn{Provider: "anthropic", API: harness.Anthropic, KeyEnv: "ANTHROPIC_API_KEY", Key: "from-runner", Model: "claude-x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := modelConn(tt.harness, &tt.req, tt.env, func(k string) string { return runnerEnv[k] })
			if tt.want == (harness.ModelConn{}) {
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
			_, err := modelConn("claude", &tt.req, map[string]string{"A": "a", "B": "b"}, func(string) string { return "" })
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
		if got := claudeMode(tt.p); got != tt.want {
			t.Errorf("claudeMode(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestConfigurerNotInstalled(t *testing.T) {
	cfg, ok := loadConfig(testEnv(t, "AGENTA_RUNNER_HARNESS_DIR="+t.TempDir()), &bytes.Buffer{})
	if !ok {
		t.Fatal("config")
	}
	conf := harnessConfigurer(cfg, nil)
	_, err := conf(t.Context(), runner.HarnessSetup{Harness: "gemini", Request: &wire.Request{}, Home: "/h"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "run `runner harness install gemini`") {
		t.Fatalf("err %v, want ErrUnavailable naming the install command", err)
	}
	// A custom command is used as it is.
	hc, err := conf(t.Context(), runner.HarnessSetup{Harness: "fake", Request: &wire.Request{}, Home: "/h"})
	if err != nil || hc.Command != nil || hc.Files != nil {
		t.Fatalf("custom harness: %+v, %v", hc, err)
	}
}

func TestRunNotInstalledHarness(t *testing.T) {
	var out, errb bytes.Buffer
	env := testEnv(t, "AGENTA_RUNNER_HARNESS_DIR="+t.TempDir())
	code := run(t.Context(), []string{"run", "--harness", "claude", "--prompt", "hi"}, env, nil, &out, &errb)
	var res wire.Result
	_ = json.Unmarshal(out.Bytes(), &res)
	if code != 1 || res.OK || !strings.Contains(res.Error, "runner harness install claude") {
		t.Fatalf("code %d result %s stderr %s", code, out.String(), errb.String())
	}
}

func TestHarnessListAndHealth(t *testing.T) {
	dir := t.TempDir()
	env := testEnv(t, "AGENTA_RUNNER_HARNESS_DIR="+dir)
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"harness", "list"}, env, nil, &out, &errb); code != 0 {
		t.Fatalf("harness list: %d %s", code, errb.String())
	}
	for _, want := range []string{"harness dir: " + dir, "claude     not installed", "install: runner harness install claude"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("harness list lacks %q:\n%s", want, out.String())
		}
	}
	cfg, _ := loadConfig(env, &errb)
	st := harnessStatus(cfg)
	want := map[string]any{
		"claude": map[string]any{"installed": false, "source": "harness_dir", "install": "runner harness install claude"},
		"fake":   map[string]any{"installed": true, "source": "custom"},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, st[name]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	sub := subscriptionStatus(cfg, env)
	if got := sub["claude"].(map[string]any)["installed"]; got != false {
		t.Errorf("subscription-status claude installed = %v", got)
	}
	if code := run(t.Context(), []string{"harness", "install", "nosuch"}, env, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), `unknown harness "nosuch"`) {
		t.Errorf("install nosuch: %d %s", code, errb.String())
	}
}

// TestServeRefusesUnconfigurableHarness: over HTTP, a built-in harness
// that is not installed is a 503 naming the install command, and an
// installed one without a modelConnection is a 400; neither hangs.
func TestServeRefusesUnconfigurableHarness(t *testing.T) {
	hdir := t.TempDir()
	// A stand-in install of gemini: the package at its pinned version
	// with its bin script. It never starts: configuration fails first.
	pkg := filepath.Join(hdir, "gemini", "node_modules", "@google", "gemini-cli")
	if err := os.MkdirAll(filepath.Join(pkg, "bundle"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"version":"0.61.0","bin":{"gemini":"bundle/gemini.js"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "bundle", "gemini.js"), []byte("process.exit(1)\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rs := startRealServe(t, ctx, hdir, t.TempDir())
	post := func(body string) (int, wire.Result) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rs.base+"/run", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res wire.Result
		_ = json.NewDecoder(resp.Body).Decode(&res)
		return resp.StatusCode, res
	}
	code, res := post(`{"harness":"claude","messages":[{"role":"user","content":"hi"}]}`)
	if code != http.StatusServiceUnavailable || res.OK || !strings.Contains(res.Error, "run `runner harness install claude`") {
		t.Errorf("claude not installed: %d %+v", code, res)
	}
	code, res = post(`{"harness":"gemini","model":"gemini-2.5-flash","messages":[{"role":"user","content":"hi"}]}`)
	if code != http.StatusBadRequest || res.OK || !strings.Contains(res.Error, "modelConnection: harness gemini needs one") {
		t.Errorf("gemini without modelConnection: %d %+v", code, res)
	}
	var health map[string]any
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rs.base+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&health)
	inst, _ := health["harnessesInstalled"].(map[string]any)
	if g, _ := inst["gemini"].(map[string]any); g["installed"] != true || g["version"] != "0.61.0" {
		t.Errorf("/health harnessesInstalled.gemini = %v", inst["gemini"])
	}
	if c, _ := inst["claude"].(map[string]any); c["installed"] != false {
		t.Errorf("/health harnessesInstalled.claude = %v", inst["claude"])
	}
}

// TestHarnessStatusCached: /health reads the harness directory at most
// once a second, and again once the second is over (or the clock went
// back).
func TestHarnessStatusCached(t *testing.T) {
	now := time.Unix(1000, 0)
	reads := 0
	c := &harnessStatusCache{status: func() map[string]any { reads++; return map[string]any{"n": reads} }, now: func() time.Time { return now }}
	for _, step := range []struct {
		advance time.Duration
		reads   int
	}{{0, 1}, {500 * time.Millisecond, 1}, {499 * time.Millisecond, 1}, {time.Millisecond, 2}, {-time.Minute, 3}} {
		now = now.Add(step.advance)
		if got := c.get()["n"]; got != step.reads || reads != step.reads {
			t.Fatalf("after %v: status %v with %d reads, want %d", step.advance, got, reads, step.reads)
		}
	}
}
