package harness_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/google/go-cmp/cmp"
)

const home = "/run/session/home"

func TestConfigure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		harness string
		mc      harness.ModelConn
		dirs    harness.Dirs
		want    harness.Config
	}{
		{
			name:    "claude as root",
			harness: "claude",
			mc:      harness.ModelConn{API: harness.Anthropic, BaseURL: "http://127.0.0.1:18080/", Key: "sk-test", Model: "claude-fake"},
			dirs:    harness.Dirs{Home: home, Root: true},
			want: harness.Config{Env: map[string]string{
				"HOME":                                     home,
				"CLAUDE_CONFIG_DIR":                        home + "/.claude",
				"ANTHROPIC_BASE_URL":                       "http://127.0.0.1:18080",
				"ANTHROPIC_API_KEY":                        "sk-test",
				"ANTHROPIC_MODEL":                          "claude-fake",
				"ANTHROPIC_DEFAULT_OPUS_MODEL":             "claude-fake",
				"ANTHROPIC_DEFAULT_SONNET_MODEL":           "claude-fake",
				"ANTHROPIC_DEFAULT_HAIKU_MODEL":            "claude-fake",
				"ANTHROPIC_SMALL_FAST_MODEL":               "claude-fake",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
				"DISABLE_AUTOUPDATER":                      "1",
				"DISABLE_TELEMETRY":                        "1",
				"DISABLE_ERROR_REPORTING":                  "1",
				"CLAUDE_CODE_MAX_RETRIES":                  "2",
				"IS_SANDBOX":                               "1",
			}},
		},
		{
			name:    "claude, public endpoint, not root",
			harness: "claude",
			mc:      harness.ModelConn{API: harness.Anthropic, Key: "sk-test", Model: "claude-sonnet-4-5"},
			dirs:    harness.Dirs{Home: home},
			want: harness.Config{Env: map[string]string{
				"HOME":                                     home,
				"CLAUDE_CONFIG_DIR":                        home + "/.claude",
				"ANTHROPIC_API_KEY":                        "sk-test",
				"ANTHROPIC_MODEL":                          "claude-sonnet-4-5",
				"ANTHROPIC_DEFAULT_OPUS_MODEL":             "claude-sonnet-4-5",
				"ANTHROPIC_DEFAULT_SONNET_MODEL":           "claude-sonnet-4-5",
				"ANTHROPIC_DEFAULT_HAIKU_MODEL":            "claude-sonnet-4-5",
				"ANTHROPIC_SMALL_FAST_MODEL":               "claude-sonnet-4-5",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
				"DISABLE_AUTOUPDATER":                      "1",
				"DISABLE_TELEMETRY":                        "1",
				"DISABLE_ERROR_REPORTING":                  "1",
				"CLAUDE_CODE_MAX_RETRIES":                  "2",
			}},
		},
		{
			name:    "codex",
			harness: "codex",
			mc: harness.ModelConn{Provider: "Fake \"local\"", API: harness.OpenAIResponses, BaseURL: "http://127.0.0.1:18080/v1",
				KeyEnv: "FAKE_API_KEY", Key: "fake", Model: "gpt-5.5"},
			dirs: harness.Dirs{Home: home, Root: true},
			want: harness.Config{
				Files: []harness.File{{Path: ".codex/config.toml", Mode: 0o600, Content: `model = "gpt-5.5"
model_provider = "runner"
check_for_update_on_startup = false

[model_providers.runner]
name = "Fake \"local\""
base_url = "http://127.0.0.1:18080/v1"
env_key = "FAKE_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
`}},
				Env: map[string]string{
					"HOME":         home,
					"CODEX_HOME":   home + "/.codex",
					"FAKE_API_KEY": "fake",
					"NO_BROWSER":   "1",
				},
			},
		},
		{
			name:    "pi on chat completions",
			harness: "pi_core",
			mc: harness.ModelConn{Provider: "fake", API: harness.OpenAIChat, BaseURL: "http://127.0.0.1:18080/v1",
				KeyEnv: "FAKE_API_KEY", Key: "fake-key", Model: "fake-model"},
			dirs: harness.Dirs{Home: home},
			want: harness.Config{
				Files: []harness.File{
					{Path: ".pi/agent/models.json", Mode: 0o600, Content: `{
  "providers": {
    "fake": {
      "api": "openai-completions",
      "apiKey": "FAKE_API_KEY",
      "baseUrl": "http://127.0.0.1:18080/v1",
      "compat": {
        "supportsDeveloperRole": false,
        "supportsReasoningEffort": false
      },
      "models": [
        {
          "contextWindow": 128000,
          "id": "fake-model",
          "maxTokens": 4096,
          "name": "fake-model"
        }
      ]
    }
  }
}
`},
					{Path: ".pi/agent/settings.json", Mode: 0o600, Content: `{
  "defaultModel": "fake-model",
  "defaultProvider": "fake",
  "defaultThinkingLevel": "off",
  "enableInstallTelemetry": false,
  "quietStartup": true
}
`},
				},
				Env: map[string]string{
					"HOME":                  home,
					"PI_CODING_AGENT_DIR":   home + "/.pi/agent",
					"PI_OFFLINE":            "1",
					"PI_SKIP_VERSION_CHECK": "1",
					"PI_TELEMETRY":          "0",
					"FAKE_API_KEY":          "fake-key",
				},
			},
		},
		{
			name:    "pi_agenta on gemini takes the versioned URL",
			harness: "pi_agenta",
			mc:      harness.ModelConn{API: harness.Gemini, BaseURL: "http://127.0.0.1:18080", Key: "g", Model: "gemini-2.5-flash"},
			dirs:    harness.Dirs{Home: home},
			want: harness.Config{
				Files: []harness.File{
					{Path: ".pi/agent/models.json", Mode: 0o600, Content: `{
  "providers": {
    "runner": {
      "api": "google-generative-ai",
      "apiKey": "GEMINI_API_KEY",
      "baseUrl": "http://127.0.0.1:18080/v1beta",
      "models": [
        {
          "contextWindow": 128000,
          "id": "gemini-2.5-flash",
          "maxTokens": 4096,
          "name": "gemini-2.5-flash"
        }
      ]
    }
  }
}
`},
					{Path: ".pi/agent/settings.json", Mode: 0o600, Content: `{
  "defaultModel": "gemini-2.5-flash",
  "defaultProvider": "runner",
  "defaultThinkingLevel": "off",
  "enableInstallTelemetry": false,
  "quietStartup": true
}
`},
				},
				Env: map[string]string{
					"HOME":                  home,
					"PI_CODING_AGENT_DIR":   home + "/.pi/agent",
					"PI_OFFLINE":            "1",
					"PI_SKIP_VERSION_CHECK": "1",
					"PI_TELEMETRY":          "0",
					"GEMINI_API_KEY":        "g",
				},
			},
		},
		{
			name:    "gemini",
			harness: "gemini",
			mc:      harness.ModelConn{API: harness.Gemini, BaseURL: "http://127.0.0.1:18080", Key: "fake", Model: "gemini-2.5-flash"},
			dirs:    harness.Dirs{Home: home, Root: true},
			want: harness.Config{
				Files: []harness.File{{Path: ".gemini/settings.json", Mode: 0o600, Content: `{
  "general": {
    "checkpointing": {
      "enabled": false
    },
    "enableAutoUpdate": false,
    "enableAutoUpdateNotification": false,
    "maxAttempts": 3
  },
  "model": {
    "name": "gemini-2.5-flash"
  },
  "privacy": {
    "usageStatisticsEnabled": false
  },
  "security": {
    "auth": {
      "selectedType": "gemini-api-key"
    },
    "folderTrust": {
      "enabled": false
    }
  },
  "telemetry": {
    "enabled": false
  }
}
`}},
				Env: map[string]string{
					"HOME":                     home,
					"GEMINI_API_KEY":           "fake",
					"GOOGLE_GEMINI_BASE_URL":   "http://127.0.0.1:18080",
					"GEMINI_TELEMETRY_ENABLED": "false",
					"GEMINI_CLI_NO_RELAUNCH":   "true",
				},
			},
		},
		{
			name:    "opencode on anthropic",
			harness: "opencode",
			mc:      harness.ModelConn{Provider: "fake", API: harness.Anthropic, BaseURL: "http://127.0.0.1:18080", Key: "k", Model: "claude-fake"},
			dirs:    harness.Dirs{Home: home},
			want: harness.Config{
				Files: []harness.File{{Path: ".config/opencode/opencode.json", Mode: 0o600, Content: `{
  "$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "model": "fake/claude-fake",
  "permission": {
    "bash": "ask",
    "edit": "ask",
    "webfetch": "ask"
  },
  "provider": {
    "fake": {
      "models": {
        "claude-fake": {
          "name": "claude-fake",
          "tool_call": true
        }
      },
      "name": "fake",
      "npm": "@ai-sdk/anthropic",
      "options": {
        "apiKey": "{env:ANTHROPIC_API_KEY}",
        "baseURL": "http://127.0.0.1:18080/v1"
      }
    }
  },
  "share": "disabled"
}
`}},
				Env: map[string]string{
					"HOME":                          home,
					"XDG_CONFIG_HOME":               home + "/.config",
					"XDG_DATA_HOME":                 home + "/.local/share",
					"XDG_STATE_HOME":                home + "/.local/state",
					"XDG_CACHE_HOME":                home + "/.cache",
					"OPENCODE_DISABLE_AUTOUPDATE":   "1",
					"OPENCODE_DISABLE_MODELS_FETCH": "1",
					"OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
					"OPENCODE_DISABLE_SHARE":        "1",
					"ANTHROPIC_API_KEY":             "k",
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := harness.Configure(tt.harness, tt.mc, tt.dirs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigureRejects(t *testing.T) {
	t.Parallel()
	ok := harness.ModelConn{API: harness.OpenAIResponses, Key: "k", Model: "m"}
	tests := []struct {
		name    string
		harness string
		mc      harness.ModelConn
		home    string
		class   error
		msg     string
	}{
		{"unknown harness", "aider", ok, home, errdefs.ErrUnprocessable, `unknown harness "aider"`},
		{"codex has no chat wire API", "codex", harness.ModelConn{API: harness.OpenAIChat, Model: "m"}, home, errdefs.ErrInvalid,
			`harness codex cannot call the "openai-chat" API (it calls openai-responses)`},
		{"claude speaks only anthropic", "claude", ok, home, errdefs.ErrInvalid, `cannot call the "openai-responses" API`},
		{"no model", "codex", harness.ModelConn{API: harness.OpenAIResponses}, home, errdefs.ErrInvalid, "names no model"},
		{"relative home", "codex", ok, "home", errdefs.ErrInvalid, "not absolute"},
		{"bad key variable", "pi_core", harness.ModelConn{API: harness.OpenAIChat, Model: "m", KeyEnv: "MY-KEY"}, home, errdefs.ErrInvalid, "not a valid environment variable name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := harness.Configure(tt.harness, tt.mc, harness.Dirs{Home: tt.home})
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want %v containing %q", err, tt.class, tt.msg)
			}
		})
	}
}

func TestConfigWriteAndEnviron(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, err := harness.Configure("pi_core", harness.ModelConn{API: harness.OpenAIChat, Key: "k", Model: "m"}, harness.Dirs{Home: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, ".pi", "agent", "models.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("models.json: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, ".pi")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf(".pi: %v %v", fi, err)
	}
	env := c.Environ([]string{"PATH=/usr/bin", "HOME=/root", "OPENAI_API_KEY=outer"})
	want := []string{"PATH=/usr/bin", "HOME=" + dir, "OPENAI_API_KEY=k", "PI_CODING_AGENT_DIR=" + dir + "/.pi/agent",
		"PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1", "PI_TELEMETRY=0"}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("Environ (-want +got):\n%s", diff)
	}
}

// opencode's own provider ids get custom loaders (openai goes through
// .responses()), so a connection named like one is renamed.
func TestConfigureOpencodeBuiltinProviderID(t *testing.T) {
	got, err := harness.Configure("opencode", harness.ModelConn{Provider: "openai", API: harness.OpenAIChat, BaseURL: "http://127.0.0.1:1/v1", Key: "k", Model: "m"}, harness.Dirs{Home: "/h"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Model    string                    `json:"model"`
		Provider map[string]map[string]any `json:"provider"`
	}
	if err := json.Unmarshal([]byte(got.Files[0].Content), &cfg); err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Provider["runner-openai"]; !ok || cfg.Model != "runner-openai/m" {
		t.Errorf("model %q, providers %v; want runner-openai", cfg.Model, cfg.Provider)
	}
}
