package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/runnertest"
)

// TestJobsCommand: `runner jobs submit` queues a job on a running
// service, `show -o json` follows it to its end, `list` shows it as a
// table, and a refused job exits 1 with the service's message.
func TestJobsCommand(t *testing.T) {
	ln, base := runnertest.Listen(t)
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken, "AGENTA_RUNNER_JOBS_POLL_MS=50")
	ctx, cancel := context.WithCancel(t.Context())
	var stderr runnertest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(withListener(ctx, ln), []string{"serve"}, env, nil, io.Discard, &stderr) }()
	defer func() { cancel(); <-done }()
	runnertest.WaitHealthy(t, base, nil, nil)

	var out, errb bytes.Buffer
	spec := `{"request":{"harness":"fake","messages":[{"role":"user","content":"say from the cli"}]}}`
	if code := run(t.Context(), []string{"jobs", "submit", "-url", base}, env, strings.NewReader(spec), &out, &errb); code != 0 {
		t.Fatalf("jobs submit: %d %s", code, errb.String())
	}
	var j jobs.Job
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || j.ID == "" {
		t.Fatalf("jobs submit printed %q (%v)", out.String(), err)
	}
	deadline := time.Now().Add(time.Minute)
	for j.Status != jobs.Succeeded {
		if time.Now().After(deadline) {
			t.Fatalf("job never succeeded: %+v\n%s", j, stderr.String())
		}
		out.Reset()
		if code := run(t.Context(), []string{"jobs", "show", "-url", base, "-o", "json", j.ID}, env, nil, &out, &errb); code != 0 {
			t.Fatalf("jobs show: %d %s", code, errb.String())
		}
		j = jobs.Job{}
		if err := json.Unmarshal(out.Bytes(), &j); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	out.Reset()
	if code := run(t.Context(), []string{"jobs", "list", "-url", base, "-o", "text"}, env, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), j.ID) || !strings.Contains(out.String(), "succeeded") {
		t.Fatalf("jobs list: %d %s %s", code, out.String(), errb.String())
	}
	errb.Reset()
	bad := `{"request":{"harness":"nosuch","messages":[{"role":"user","content":"x"}]}}`
	if code := run(t.Context(), []string{"jobs", "submit", "-url", base}, env, strings.NewReader(bad), &out, &errb); code != 1 || !strings.Contains(errb.String(), "harness") {
		t.Fatalf("a refused job: %d %s", code, errb.String())
	}
}
