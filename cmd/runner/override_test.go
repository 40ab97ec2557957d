package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// An override that names a script outside the system directories (here
// under the host's /tmp, which an isolated sandbox replaces with its own)
// gets its package bound read-only, node_modules and all.
func TestOverrideBindsTheNamedPackage(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "claude-agent-acp")
	for _, f := range []string{"package.json", "dist/index.js", "node_modules/dep/index.js"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(pkg, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "bin", "claude-acp")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(pkg, "dist/index.js"), link); err != nil {
		t.Fatal(err)
	}
	cfg, ok := loadConfig(testEnv(t, "AGENTA_RUNNER_LOCAL_ISOLATION=bwrap", "AGENTA_RUNNER_HARNESS_CLAUDE=node "+link), &bytes.Buffer{})
	if !ok {
		t.Fatal("config")
	}
	binds, err := overrideBinds(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{filepath.Join(dir, "bin"), pkg} {
		if !slices.Contains(binds, sandbox.Bind{Path: want}) {
			t.Errorf("binds %v lack %s", binds, want)
		}
	}
}

// An override the sandbox cannot run is refused at boot, naming the
// variable, the path and why.
func TestOverrideRefusedAtBoot(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope", "agent.js")
	for _, tt := range []struct{ cmd, want string }{
		{"node " + missing, missing},
		{"node /etc/hostname", "expose /etc"},
	} {
		env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken, "AGENTA_RUNNER_LOCAL_ISOLATION=bwrap", "AGENTA_RUNNER_HARNESS_CLAUDE="+tt.cmd)
		var out, errb bytes.Buffer
		code := run(t.Context(), []string{"serve"}, env, nil, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "AGENTA_RUNNER_HARNESS_CLAUDE") || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("serve with %q: exit %d, stderr:\n%s", tt.cmd, code, errb.String())
		}
	}
}

// An override of a built-in name keeps that harness's configuration from
// modelConnection: only the command is the override's.
func TestOverrideOfABuiltinIsConfigured(t *testing.T) {
	cfg, ok := loadConfig(testEnv(t, "AGENTA_RUNNER_HARNESS_CLAUDE=node /opt/acp/claude-agent-acp"), &bytes.Buffer{})
	if !ok {
		t.Fatal("config")
	}
	req := &wire.Request{Model: "claude-x", ModelConnection: &wire.ModelConnection{Provider: "anthropic", Deployment: "custom",
		Endpoint: &wire.Endpoint{BaseURL: "https://gw.example/anthropic"}}}
	hc, err := harnessConfigurer(cfg, nil)(t.Context(), runner.HarnessSetup{Harness: "claude", Provider: "local", Request: req,
		Env: map[string]string{"ANTHROPIC_API_KEY": "k"}, Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hc.Command, []string{"node", "/opt/acp/claude-agent-acp"}) {
		t.Errorf("command %v, want the override's", hc.Command)
	}
	if hc.Env["ANTHROPIC_BASE_URL"] != "https://gw.example/anthropic" || hc.Mode == "" {
		t.Errorf("override not configured from modelConnection: env %v mode %q", hc.Env, hc.Mode)
	}
}
