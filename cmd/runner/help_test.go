package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Every subcommand answers --help with exit 0 and its usage on stdout,
// listing its flags where it has any.
func TestHelpExitsZeroOnEverySubcommand(t *testing.T) {
	cases := []struct {
		args  []string
		flags []string // flags the help must list
	}{
		{[]string{"serve"}, []string{"AGENTA_RUNNER_TOKEN", "AGENTA_RUNNER_LOCAL_ISOLATION", "DAYTONA_API_KEY", "default: 8765"}},
		{[]string{"run"}, []string{"-harness", "-prompt", "-stream", "Exit status", "130"}},
		{[]string{"health"}, []string{"-url", "-o"}},
		{[]string{"sessions"}, []string{"-url", "sessions tail", "sessions [flags] ID"}},
		{[]string{"jobs"}, []string{"submit", "tail"}},
		{[]string{"jobs", "submit"}, []string{"-url", "-f", "jobs cancel ID"}},
		{[]string{"harness"}, nil},
		{[]string{"harness", "install"}, []string{"claude", "pi_core", "gemini"}},
		{[]string{"harness", "list"}, []string{"-json"}},
		{[]string{"daytona"}, nil},
		{[]string{"daytona", "snapshot", "build"}, []string{"-name", "-base", "-harness", "-timeout"}},
		{[]string{"mcp-stdio"}, []string{"-socket"}},
		{[]string{"sandboxd"}, []string{"-listen", "-state-dir", "-detach"}},
		{[]string{"channel-forward"}, nil},
		{[]string{"sandbox-proxy-bridge"}, nil},
		{[]string{"version"}, nil},
	}
	for _, c := range cases {
		for _, h := range []string{"--help", "-h"} {
			args := append(append([]string{}, c.args...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				var out, errb bytes.Buffer
				env := []string{"HOME=" + t.TempDir(), "AGENTA_RUNNER_DATA_DIR=" + t.TempDir()}
				code := run(context.Background(), args, env, strings.NewReader(""), &out, &errb)
				if code != 0 {
					t.Fatalf("exit %d, want 0; stderr:\n%s", code, errb.String())
				}
				if !strings.Contains(strings.ToLower(out.String()), "usage") {
					t.Errorf("stdout has no usage:\n%s", out.String())
				}
				for _, f := range c.flags {
					if !strings.Contains(out.String(), f) {
						t.Errorf("help does not list %s:\n%s", f, out.String())
					}
				}
			})
		}
	}
}

// runner health summarises /health for a person (-o text, the default on
// a terminal) and prints the body as it came with -o json or when piped.
func TestHealthSummary(t *testing.T) {
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken)
	base := serveOn(t, env)
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"health", "-url", base, "-o", "text"}, env, nil, &out, &errb); code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	for _, want := range []string{"runner ", base + ": ok", "harnesses", "fake", "provider   local  isolation none", "turns      0 running"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(t.Context(), []string{"health", "-url", base}, env, nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "{") {
		t.Errorf("piped: code %d, want the JSON body: %s", code, out.String())
	}
}
