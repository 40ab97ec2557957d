package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
)

func TestDaytonaSnapshotBuild(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	env := testEnv(t, "DAYTONA_API_KEY="+fake.APIKey(), "DAYTONA_API_URL="+fake.APIURL())
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"daytona", "snapshot", "build", "--harness", "claude,pi_core,pi_agenta,gemini"}, env, nil, &out, &errb)
	if code != 0 || out.String() != "agentrunner-sandbox-v1\n" {
		t.Fatalf("code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	rec, ok := fake.Snapshot("agentrunner-sandbox-v1")
	if !ok || rec.State != "active" {
		t.Fatalf("snapshot %+v %v", rec, ok)
	}
	// Every package of the listed harnesses, at the catalogue's pin.
	for _, name := range []string{"claude", "pi_core", "gemini"} {
		h, _ := harness.Lookup(name)
		for _, p := range h.Packages {
			if !strings.Contains(rec.Dockerfile, " "+p.String()) {
				t.Errorf("Dockerfile lacks %s:\n%s", p, rec.Dockerfile)
			}
		}
		argv, _, err := harness.ImageCommand(daytona.HarnessPrefix, name)
		if err != nil || !strings.Contains(rec.Dockerfile, "test -x "+argv[0]) {
			t.Errorf("%s: the build does not check the bin the runner starts (%v, %v)", name, argv, err)
		}
	}
	if n := strings.Count(rec.Dockerfile, "npm install --prefix /opt/runner/harnesses/pi "); n != 1 {
		t.Errorf("pi installed %d times, want once for pi_core and pi_agenta", n)
	}
	if strings.Contains(rec.Dockerfile, "codex-acp") {
		t.Errorf("an unlisted harness is installed:\n%s", rec.Dockerfile)
	}

	// Again: the name exists; kept, still success.
	out.Reset()
	errb.Reset()
	code = run(t.Context(), []string{"daytona", "snapshot", "build", "--harness", "claude,pi_core,pi_agenta,gemini"}, env, nil, &out, &errb)
	if code != 0 || out.String() != "agentrunner-sandbox-v1\n" || !strings.Contains(errb.String(), "exists already") {
		t.Fatalf("rebuild: code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
}

func TestDaytonaSnapshotBuildFails(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	env := testEnv(t, "DAYTONA_API_KEY="+fake.APIKey(), "DAYTONA_API_URL="+fake.APIURL())
	fake.FailSnapshot("mine-v2", "failed to solve: npm ERR! code ETARGET")
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"daytona", "snapshot", "build", "--name", "mine-v2", "--harness", "codex"}, env, nil, &out, &errb)
	if code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), "build_failed") || !strings.Contains(errb.String(), "ETARGET") {
		t.Fatalf("code %d stdout %q stderr %q", code, out.String(), errb.String())
	}

	for _, args := range [][]string{
		{"daytona"},
		{"daytona", "snapshot", "build", "--harness", "nope"},
		{"daytona", "snapshot", "build", "--base", "node:latest"},
	} {
		errb.Reset()
		if code := run(t.Context(), args, env, nil, &out, &errb); code != 2 {
			t.Errorf("%q: code %d stderr %q, want 2", args, code, errb.String())
		}
	}
	errb.Reset()
	if code := run(t.Context(), []string{"daytona", "snapshot", "build"}, testEnv(t), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "DAYTONA_API_KEY") {
		t.Errorf("without a key: code %d stderr %q", code, errb.String())
	}
}
