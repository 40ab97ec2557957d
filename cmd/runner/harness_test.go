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

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
)

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
