package tenanttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// startJobs is start for the job tests: the queue polls often, retries
// soon and looks at parked runs often, so a test waits for states, never
// for a clock.
func startJobs(t *testing.T, env ...string) *runner {
	t.Helper()
	needBwrap(t)
	return start(t, append([]string{"AGENTA_RUNNER_JOBS_RETRY_BASE_MS=50", "AGENTA_RUNNER_JOBS_POLL_MS=50"}, env...)...)
}

// submit posts a job and returns its status and the job (or error body).
func (r *runner) submit(t *testing.T, spec map[string]any) (int, jobs.Job, string) {
	t.Helper()
	status, body := r.call(t, "POST", "/v1/jobs", spec)
	var j jobs.Job
	if status < 300 {
		if err := json.Unmarshal(body, &j); err != nil {
			t.Fatalf("POST /v1/jobs: %v: %s", err, body)
		}
	}
	return status, j, string(body)
}

func (r *runner) job(t *testing.T, id string) jobs.Job {
	t.Helper()
	status, body := r.call(t, "GET", "/v1/jobs/"+id, nil)
	if status != 200 {
		t.Fatalf("GET /v1/jobs/%s = %d %s", id, status, body)
	}
	var j jobs.Job
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// await polls the job until ok holds (a state, not a duration: the
// deadline only ends a hung test).
func (r *runner) await(t *testing.T, id string, what string, ok func(jobs.Job) bool) jobs.Job {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		j := r.job(t, id)
		if ok(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never became %s; last:\n%s\nrunner log:\n%s", id, what, pretty(j), r.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitTurn waits for the job to run with its turn begun in the ledger.
func (r *runner) awaitTurn(t *testing.T, id string) jobs.Job {
	t.Helper()
	return r.await(t, id, "running with its turn in the ledger", func(j jobs.Job) bool {
		if j.Status != jobs.Running || j.SessionID == "" {
			return false
		}
		code, _ := r.call(t, "GET", "/v1/sessions/"+j.SessionID, nil)
		return code == 200 && len(r.ledger(t, j.SessionID)) == 1
	})
}

func status(s jobs.Status) func(jobs.Job) bool { return func(j jobs.Job) bool { return j.Status == s } }

func pretty(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// ledger is the session's turns.
func (r *runner) ledger(t *testing.T, session string) []struct {
	TurnID string `json:"turnId"`
	Status string `json:"status"`
} {
	t.Helper()
	status, body := r.call(t, "GET", "/v1/sessions/"+session, nil)
	if status != 200 {
		t.Fatalf("GET /v1/sessions/%s = %d %s", session, status, body)
	}
	var v struct {
		Turns []struct {
			TurnID string `json:"turnId"`
			Status string `json:"status"`
		} `json:"turns"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v.Turns
}

// TestJobRunsAsSessionTurn: a job is a turn with no client waiting. Must
// hold: it ends succeeded with its output; its turn is in the session's
// ledger and its events in the session's log; the same idempotency key
// gives back the same job (200, not 201) and runs nothing more.
func TestJobRunsAsSessionTurn(t *testing.T) {
	r := startJobs(t)
	spec := map[string]any{"request": fake("say hello from a job", nil), "idempotencyKey": "nightly-1"}
	code, j, body := r.submit(t, spec)
	if code != http.StatusCreated || j.ID == "" {
		t.Fatalf("POST /v1/jobs = %d %s", code, body)
	}
	j = r.await(t, j.ID, "succeeded", status(jobs.Succeeded))
	if j.Result == nil || !j.Result.OK || !strings.Contains(j.Result.Output, "hello from a job") {
		t.Fatalf("result = %s", pretty(j))
	}
	if len(j.Attempts) != 1 || j.Attempts[0].Outcome != "succeeded" || j.SessionID == "" {
		t.Fatalf("attempts = %s", pretty(j))
	}
	turns := r.ledger(t, j.SessionID)
	if len(turns) != 1 || turns[0].TurnID != j.TurnID || turns[0].Status != "completed" {
		t.Fatalf("ledger of %s = %+v, want the job's turn %s completed", j.SessionID, turns, j.TurnID)
	}
	code, log := r.call(t, "GET", "/v1/sessions/"+j.SessionID+"/events", nil)
	if code != 200 || !strings.Contains(string(log), "hello from a job") {
		t.Fatalf("events = %d %s", code, log)
	}

	code, again, body := r.submit(t, spec)
	if code != http.StatusOK || again.ID != j.ID {
		t.Fatalf("same idempotency key: %d %s, want 200 and job %s", code, body, j.ID)
	}
	if got := r.ledger(t, j.SessionID); len(got) != 1 {
		t.Fatalf("a second submission ran another turn: %+v", got)
	}
	code, list := r.call(t, "GET", "/v1/jobs?status=succeeded", nil)
	if code != 200 || strings.Count(string(list), `"jobId"`) != 1 {
		t.Fatalf("GET /v1/jobs?status=succeeded = %d %s", code, list)
	}
}

// TestJobBadInput: what the queue could never run is refused when it is
// submitted, with 400 naming the field, and nothing is queued.
func TestJobBadInput(t *testing.T) {
	r := startJobs(t)
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"cron", map[string]any{"request": fake("say x", nil), "schedule": map[string]any{"cron": "61 * * * *"}}, "schedule.cron"},
		{"timezone", map[string]any{"request": fake("say x", nil), "schedule": map[string]any{"cron": "0 3 * * *", "timezone": "Mars/Olympus"}}, "schedule.timezone"},
		{"harness", map[string]any{"request": map[string]any{"harness": "nosuch", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}}, "harness"},
		{"loopback webhook", map[string]any{"request": fake("say x", nil), "webhook": map[string]any{"url": "https://127.0.0.1:9/hook"}}, "webhook.url"},
		{"metadata webhook", map[string]any{"request": fake("say x", nil), "webhook": map[string]any{"url": "https://169.254.169.254/latest/meta-data"}}, "webhook.url"},
		{"plain http webhook", map[string]any{"request": fake("say x", nil), "webhook": map[string]any{"url": "http://example.com/hook"}}, "webhook.url"},
		{"unknown secret", map[string]any{"request": fake("say x", nil), "webhook": map[string]any{"url": "https://8.8.8.8/hook", "secretRef": "nosuch"}}, "webhook.secretRef"},
		{"unknown field", map[string]any{"request": fake("say x", nil), "retries": 3}, "retries"},
		{"no request", map[string]any{"idempotencyKey": "k"}, "request"},
	} {
		code, _, body := r.submit(t, tc.spec)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, code, body, tc.field)
		}
	}
	if code, list := r.call(t, "GET", "/v1/jobs", nil); code != 200 || strings.Contains(string(list), "jobId") {
		t.Fatalf("a refused job was queued: %d %s", code, list)
	}
}

// TestJobModelFailureNotRetried: a turn that ran and failed on the
// harness's side (it crashed mid-turn) is the run's outcome: one attempt,
// failed, never retried.
func TestJobModelFailureNotRetried(t *testing.T) {
	r := startJobs(t)
	_, j, body := r.submit(t, map[string]any{"request": fake("say before\ncrash 3", nil), "retry": map[string]any{"maxAttempts": 5}})
	if j.ID == "" {
		t.Fatal(body)
	}
	j = r.await(t, j.ID, "failed", status(jobs.Failed))
	if len(j.Attempts) != 1 || j.Result == nil || j.Result.OK || j.Result.Error == "" {
		t.Fatalf("want one failed attempt: %s", pretty(j))
	}
}

// TestJobInfrastructureFaultRetried: the harness fails to start on the
// first attempt (no turn ran); the attempt is retried and the second one
// succeeds, in the same session.
func TestJobInfrastructureFaultRetried(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "started-once")
	script := filepath.Join(dir, "flaky")
	body := fmt.Sprintf("#!/bin/sh\nif [ ! -e %s ]; then : > %s; echo 'flaky harness: first start fails' >&2; exit 3; fi\nexec %s\n", mark, mark, strings.Join(agenttest.Command(), " "))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	// The script and its mark live on the host: run harnesses unconfined.
	r := start(t, "AGENTA_RUNNER_JOBS_RETRY_BASE_MS=50", "AGENTA_RUNNER_JOBS_POLL_MS=50",
		"AGENTA_RUNNER_LOCAL_ISOLATION=none", "AGENTA_RUNNER_LOCAL_NETWORK=host", "AGENTA_RUNNER_HARNESS_FLAKY="+script)
	_, j, out := r.submit(t, map[string]any{"request": map[string]any{"harness": "flaky", "messages": []any{map[string]any{"role": "user", "content": "say second time lucky"}}}})
	if j.ID == "" {
		t.Fatal(out)
	}
	j = r.await(t, j.ID, "succeeded", status(jobs.Succeeded))
	if len(j.Attempts) != 2 || j.Attempts[0].Outcome != "retry" || j.Attempts[1].Outcome != "succeeded" || !strings.Contains(j.Result.Output, "second time lucky") {
		t.Fatalf("want a retried then successful attempt: %s", pretty(j))
	}
}

// TestJobCancel: DELETE stops a running job's turn as /kill does, and a
// queued job never runs.
func TestJobCancel(t *testing.T) {
	r := startJobs(t)
	_, run, _ := r.submit(t, map[string]any{"request": fake("say started\nsleep 60s\nsay never", nil)})
	run = r.awaitTurn(t, run.ID)
	code, body := r.call(t, "DELETE", "/v1/jobs/"+run.ID, nil)
	if code != 200 {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	run = r.await(t, run.ID, "cancelled with its turn ended", func(j jobs.Job) bool {
		turns := r.ledger(t, j.SessionID)
		return j.Status == jobs.Cancelled && len(turns) == 1 && turns[0].Status != "running"
	})
	if turns := r.ledger(t, run.SessionID); turns[0].Status == "completed" {
		t.Fatalf("the cancelled job's turn completed: %+v", turns)
	}

	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	_, queued, _ := r.submit(t, map[string]any{"request": fake("say never", nil), "notBefore": later})
	if queued.Status != jobs.Queued {
		t.Fatalf("want queued: %s", pretty(queued))
	}
	if code, body := r.call(t, "DELETE", "/v1/jobs/"+queued.ID, nil); code != 200 {
		t.Fatalf("DELETE queued = %d %s", code, body)
	}
	if j := r.job(t, queued.ID); j.Status != jobs.Cancelled || len(j.Attempts) != 0 {
		t.Fatalf("queued job after cancel: %s", pretty(j))
	}
	if code, body := r.call(t, "DELETE", "/v1/jobs/"+queued.ID, nil); code != http.StatusConflict {
		t.Fatalf("DELETE twice = %d %s, want 409", code, body)
	}
}

// TestJobApproval: a job that needs a person's approval parks like any
// turn: waiting_approval with the interaction id; the answer through the
// session's interactions route resumes it, and the job succeeds.
func TestJobApproval(t *testing.T) {
	r := startJobs(t)
	_, j, _ := r.submit(t, map[string]any{"request": fake("permission deploy\nsay deployed", map[string]any{"permissions": map[string]any{"default": "ask"}})})
	j = r.await(t, j.ID, "waiting_approval", status(jobs.WaitingApproval))
	if j.InteractionID == "" {
		t.Fatalf("no interaction id: %s", pretty(j))
	}
	code, body := r.call(t, "POST", "/v1/sessions/"+j.SessionID+"/interactions/"+j.InteractionID, map[string]any{"approved": true})
	if code != 200 {
		t.Fatalf("approve = %d %s", code, body)
	}
	j = r.await(t, j.ID, "succeeded", status(jobs.Succeeded))
	// The answer continues the turn as the session's next one.
	if turns := r.ledger(t, j.SessionID); len(turns) != 2 || turns[0].Status != "paused" || turns[1].Status != "completed" {
		t.Fatalf("ledger after the approval: %+v", turns)
	}
}

// TestJobWebhookSignedAndRetried: the job's end is posted to its
// webhook, signed as Standard Webhooks says with the secret its
// secretRef names; a 500 is retried with the same webhook-id, and every
// delivery attempt shows on the job.
func TestJobWebhookSignedAndRetried(t *testing.T) {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	type got struct {
		id, ts, sig string
		body        []byte
	}
	var mu sync.Mutex
	var calls []got
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, got{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), b})
		n := len(calls)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	r := startJobs(t, "AGENTA_AGENT_MCPS_HOST_ALLOWLIST=127.0.0.1", "AGENTA_RUNNER_JOBS_WEBHOOK_SECRETS=ops="+secret)
	_, j, body := r.submit(t, map[string]any{"request": fake("say hooked", nil), "webhook": map[string]any{"url": srv.URL + "/hook", "secretRef": "ops"}})
	if j.ID == "" {
		t.Fatal(body)
	}
	j = r.await(t, j.ID, "succeeded with two deliveries", func(j jobs.Job) bool { return j.Status == jobs.Succeeded && len(j.Deliveries) == 2 })
	if d := j.Deliveries; d[0].OK || d[0].Status != 500 || !d[1].OK || d[0].ID != d[1].ID || d[1].Event != jobs.Succeeded {
		t.Fatalf("deliveries: %s", pretty(d))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls {
		ts, _ := strconv.ParseInt(c.ts, 10, 64)
		if !jobs.Verify(jobs.ParseSecret(secret), c.id, ts, c.body, c.sig) {
			t.Fatalf("bad signature %q on %s", c.sig, c.body)
		}
		var ev jobs.Event
		if err := json.Unmarshal(c.body, &ev); err != nil || ev.Type != "job.succeeded" || ev.JobID != j.ID || !ev.Result.OK {
			t.Fatalf("webhook body %s (%v)", c.body, err)
		}
	}
	if strings.Contains(r.Log(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") {
		t.Fatal("the webhook secret is in the runner's log")
	}
	if code, b := r.call(t, "GET", "/v1/jobs/"+j.ID, nil); code != 200 || strings.Contains(string(b), "MfKQ9r8") {
		t.Fatalf("the job shows its secret: %s", b)
	}
}

// TestJobSurvivesKill9: the runner is killed (SIGKILL) in the middle of
// a job's turn and started again on its data dir. Must hold: the job is
// picked up again and succeeds, its interrupted turn stays interrupted
// and exactly one turn of the job is committed.
func TestJobSurvivesKill9(t *testing.T) {
	r := startJobs(t)
	_, j, _ := r.submit(t, map[string]any{"request": fake("say started\nsleep 5s\nsay finished", nil)})
	j = r.awaitTurn(t, j.ID)
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.done
	r.cmd = nil
	r.run(t)
	j = r.await(t, j.ID, "succeeded", status(jobs.Succeeded))
	turns := r.ledger(t, j.SessionID)
	completed := 0
	for _, tr := range turns {
		if tr.Status == "completed" {
			completed++
		}
	}
	if len(turns) != 2 || turns[0].Status != "interrupted" || completed != 1 || !strings.Contains(j.Result.Output, "finished") {
		t.Fatalf("ledger %+v; job %s", turns, pretty(j))
	}
}

// TestAttackWebhookRebind: a job's webhook names a host that resolves to
// a public address when the job is submitted, then to the host's
// loopback when the webhook is posted (a rebinding DNS answer). Must
// hold: the job is accepted (the URL looked public), and the delivery is
// refused at dial time — recorded on the job as refused — while the
// loopback listener sees no connection: a job never makes the runner a
// proxy to its own host.
func TestAttackWebhookRebind(t *testing.T) {
	needBwrap(t)
	loop := watch(t, "127.0.0.1:0")
	wrap := withHosts(t, map[string]string{"hook.attack.test": "8.8.8.8"})
	hosts := wrap[len(wrap)-1]
	r := startWrapped(t, wrap, "AGENTA_RUNNER_JOBS_RETRY_BASE_MS=50", "AGENTA_RUNNER_JOBS_POLL_MS=50")
	// The run waits past the resolver's cache of /etc/hosts (5 s).
	notBefore := time.Now().Add(7 * time.Second).UTC().Format(time.RFC3339Nano)
	code, j, body := r.submit(t, map[string]any{"request": fake("say done", nil), "notBefore": notBefore,
		"webhook": map[string]any{"url": "https://hook.attack.test:" + loop.Port + "/hook"}})
	if code != http.StatusCreated {
		t.Fatalf("submit = %d %s", code, body)
	}
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n127.0.0.1 hook.attack.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j = r.await(t, j.ID, "succeeded with a refused delivery", func(j jobs.Job) bool { return j.Status == jobs.Succeeded && len(j.Deliveries) > 0 })
	if d := j.Deliveries[0]; d.OK || !strings.Contains(d.Error, "refused") {
		t.Fatalf("delivery %s, want refused at dial time", pretty(d))
	}
	if n := loop.connections(t); n != 0 {
		t.Fatalf("the loopback listener got %d connections from the webhook", n)
	}
}

// TestAttackJobOtherProject: a project token submits and sees only its
// project's jobs. Must hold: A's job is A's (a request naming no project
// is given A's); B's token gets 404 for it on every route, its list
// holds none of A's, and it cannot submit into A; the runner's token
// reaches every project.
func TestAttackJobOtherProject(t *testing.T) {
	r := startJobs(t, "AGENTA_RUNNER_PROJECT_TOKENS=projA="+tokenA+",projB="+tokenB)
	code, body := callAs(t, r, tokenA, "POST", "/v1/jobs", map[string]any{"request": fake("say for A", nil)}, "")
	var j jobs.Job
	if err := json.Unmarshal(body, &j); code != http.StatusCreated || err != nil || j.ProjectID != "projA" {
		t.Fatalf("A's submit = %d %s", code, body)
	}
	for _, rt := range []struct{ method, path string }{{"GET", "/v1/jobs/" + j.ID}, {"DELETE", "/v1/jobs/" + j.ID}, {"POST", "/v1/jobs/" + j.ID + "/run"}} {
		if code, body := callAs(t, r, tokenB, rt.method, rt.path, nil, ""); code != http.StatusNotFound {
			t.Errorf("B: %s %s = %d %s, want 404", rt.method, rt.path, code, body)
		}
	}
	if code, body := callAs(t, r, tokenB, "GET", "/v1/jobs", nil, ""); code != 200 || strings.Contains(string(body), j.ID) {
		t.Errorf("B's list = %d %s", code, body)
	}
	if code, body := callAs(t, r, tokenB, "GET", "/v1/jobs", nil, "projA"); code != http.StatusForbidden {
		t.Errorf("B listing A's jobs = %d %s, want 403", code, body)
	}
	if code, body := callAs(t, r, tokenB, "POST", "/v1/jobs", map[string]any{"request": fake("say into A", map[string]any{"projectId": "projA"})}, ""); code != http.StatusForbidden {
		t.Errorf("B submitting into A = %d %s, want 403", code, body)
	}
	if got := r.await(t, j.ID, "succeeded", status(jobs.Succeeded)); got.ProjectID != "projA" {
		t.Fatalf("job %s", pretty(got))
	}
}

// TestJobPostgresReplicaLoss: two replicas share PostgreSQL; the one
// running a job's turn is killed (SIGKILL). Must hold: the other replica
// takes the run (River's rescuer), waits out the dead replica's session
// lease rather than running beside it, and finishes the job; exactly one
// turn of the job is committed. Both replicas serve the job's state.
func TestJobPostgresReplicaLoss(t *testing.T) {
	url := storetest.PostgresSchema(t)
	// No disk quotas: the killed replica never restarts to unmount its
	// sandboxes' loop images, which would keep the temp dir busy.
	env := []string{"AGENTA_RUNNER_DATABASE_URL=" + url, "AGENTA_RUNNER_JOBS_RESCUE_AFTER_MS=2000", "AGENTA_RUNNER_LOCAL_DISK_MB=0"}
	a := startJobs(t, append(env, "AGENTA_RUNNER_REPLICA_ID=replica-a")...)
	b := startJobs(t, append(env, "AGENTA_RUNNER_REPLICA_ID=replica-b")...)
	code, j, body := a.submit(t, map[string]any{"request": fake("say started\nsleep 4s\nsay finished", nil), "idempotencyKey": "once"})
	if code != http.StatusCreated {
		t.Fatalf("submit = %d %s", code, body)
	}
	if code, again, _ := b.submit(t, map[string]any{"request": fake("say started\nsleep 4s\nsay finished", nil), "idempotencyKey": "once"}); code != 200 || again.ID != j.ID {
		t.Fatalf("the other replica made a second job for the key: %d %s", code, pretty(again))
	}
	j = a.awaitTurn(t, j.ID)
	victim, survivor := a, b
	if j.Attempts[len(j.Attempts)-1].Replica == "replica-b" {
		victim, survivor = b, a
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	victim.cmd = nil
	// The dead replica's lease on the session lasts 90 s.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		j = survivor.job(t, j.ID)
		if j.Status == jobs.Succeeded {
			break
		}
		if time.Now().After(deadline) || j.Status.Ended() {
			t.Fatalf("job never succeeded on the survivor: %s\nsurvivor log:\n%s", pretty(j), survivor.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	completed := 0
	for _, tr := range survivor.ledger(t, j.SessionID) {
		if tr.Status == "completed" {
			completed++
		}
	}
	if completed != 1 || !strings.Contains(j.Result.Output, "finished") {
		t.Fatalf("%d completed turns; job %s", completed, pretty(j))
	}
}
