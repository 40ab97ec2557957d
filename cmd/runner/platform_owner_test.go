package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/store/storetest"

	"github.com/agentrunner/runner/internal/platform/platformtest"
)

const heartbeatPath = "/sessions/streams/heartbeat"

// beatsOf are the heartbeats a replica sent: with a turn (running or
// releasing beats) and without (owner claims).
func beatsOf(f *platformtest.Fake, replica string) (turnBeats, claims []platformtest.Call) {
	for _, c := range f.CallsTo(heartbeatPath) {
		var b struct {
			ReplicaID string `json:"replica_id"`
			TurnID    string `json:"turn_id"`
		}
		_ = json.Unmarshal(c.Body, &b)
		switch {
		case b.ReplicaID != replica:
		case b.TurnID != "":
			turnBeats = append(turnBeats, c)
		default:
			claims = append(claims, c)
		}
	}
	return turnBeats, claims
}

const claimFailures = `agenta_runner_platform_call_failures_total{op="heartbeat owner claim (awaited)"}`

// TestPlatformOwnerRefusesOtherReplicasSession: two replicas, each with
// its own SQLite store, behind one platform. The one that ran a session
// owns it on the platform; the other refuses to start it cold (the
// refusal inside the NDJSON stream for Agenta's client, 409 in one-shot
// JSON), naming the owner and the fix, and mirrors nothing of it but the
// claim. The owner's warm turns go on; the other replica runs sessions
// nobody owns.
func TestPlatformOwnerRefusesOtherReplicasSession(t *testing.T) {
	f := platformtest.New(t, platformCred)
	a := startPlatformRunner(t, "AGENTA_RUNNER_REPLICA_ID=replica-a")
	b := startPlatformRunner(t, "AGENTA_RUNNER_REPLICA_ID=replica-b")
	defer logCalls(t, f)

	if out, err := a.client.Run(t.Context(), agentaRequest(f, "own1", "say the password is swordfish", nil)); err != nil || out.Result.Output != "the password is swordfish" {
		t.Fatalf("owner's first turn: %v %+v", err, out.Result)
	}
	if o := f.Owner("own1"); o != "replica-a" {
		t.Fatalf("platform owner %q, want replica-a", o)
	}
	// The mirror delivers off the turn's path: count once it has all.
	f.Wait(t, "the owner's done record and completed turn", func() bool {
		return hasRecord(f, "own1", "done")() && len(f.Completed("own1")) == 1
	})
	ingested := len(f.CallsTo("/sessions/records/ingest"))

	_, err := b.client.Run(t.Context(), agentaRequest(f, "own1", "what is the password?", nil))
	if !errors.Is(err, platformtest.ErrRunFailed) {
		t.Fatalf("the other replica ran the session: %v", err)
	}
	for _, want := range []string{"session own1 is owned by replica replica-a", "this replica (replica-b)", "route the session to replica-a", "AGENTA_RUNNER_DATABASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	body, _ := json.Marshal(agentaRequest(f, "own1", "what is the password?", nil))
	resp := post(t, b.base+"/run", string(body))
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(msg), "replica-a") {
		t.Errorf("one-shot JSON refusal: %d %s", resp.StatusCode, msg)
	}

	// The refused turns reached the platform only as owner claims, so the
	// owner's session row, records, ledger and approvals are untouched.
	turnBeats, claims := beatsOf(f, "replica-b")
	if len(turnBeats) != 0 || len(claims) != 2 {
		t.Errorf("replica-b beats: %d with a turn, %d claims; want 0 and 2", len(turnBeats), len(claims))
	}
	if n := len(f.CallsTo("/sessions/turns/")); n != 1 {
		t.Errorf("turns ledger starts %d, want the owner's 1", n)
	}
	if n := len(f.CallsTo("/sessions/interactions/cancel-stale")); n != 1 {
		t.Errorf("cancel-stale calls %d, want the owner's 1", n)
	}
	if n := len(f.CallsTo("/sessions/records/ingest")); n != ingested {
		t.Errorf("records ingested after the refusals: %d, want %d", n, ingested)
	}

	// The owner's next turn is warm: it runs, and claims off its path.
	if out, err := a.client.Run(t.Context(), agentaRequest(f, "own1", "history", nil)); err != nil || !strings.Contains(out.Result.Output, "swordfish") {
		t.Fatalf("owner's warm turn: %v %+v", err, out.Result)
	}
	// A session nobody owns runs on either replica.
	if out, err := b.client.Run(t.Context(), agentaRequest(f, "own2", "say mine", nil)); err != nil || out.Result.Output != "mine" {
		t.Fatalf("unowned session on replica-b: %v %+v", err, out.Result)
	}
	if o := f.Owner("own2"); o != "replica-b" {
		t.Errorf("own2 owner %q", o)
	}
}

// TestPlatformOwnerClaimFailsOpen: a platform that is down or does not
// answer the claim never fails a cold turn: it runs after the bounded
// wait, with a warning and a counted failure. A warm turn does not wait
// for the claim at all.
func TestPlatformOwnerClaimFailsOpen(t *testing.T) {
	f := platformtest.New(t, platformCred)
	a := startPlatformRunner(t, "AGENTA_RUNNER_REPLICA_ID=replica-a")
	b := startPlatformRunner(t, "AGENTA_RUNNER_REPLICA_ID=replica-b")
	defer logCalls(t, f)
	if _, err := a.client.Run(t.Context(), agentaRequest(f, "open1", "say one", nil)); err != nil {
		t.Fatal(err)
	}

	f.SetDown(true)
	if out, err := b.client.Run(t.Context(), agentaRequest(f, "open1", "say two", nil)); err != nil || out.Result.Output != "two" {
		t.Fatalf("cold turn with the platform down: %v %+v", err, out.Result)
	}
	f.SetDown(false)
	if _, m := scrape(t, b.base+"/metrics", testToken); sample(m, claimFailures) != 1 {
		t.Errorf("claim failures counted %v, want 1", sample(m, claimFailures))
	}

	release := f.Hold(t, heartbeatPath)
	if out, err := a.client.Run(t.Context(), agentaRequest(f, "open1", "say warm", nil)); err != nil || out.Result.Output != "warm" {
		t.Fatalf("warm turn with heartbeats unanswered: %v %+v", err, out.Result)
	}
	if _, m := scrape(t, a.base+"/metrics", testToken); sample(m, claimFailures) > 0 {
		t.Errorf("the warm turn awaited an owner claim (failures %v)", sample(m, claimFailures))
	}
	if out, err := b.client.Run(t.Context(), agentaRequest(f, "open2", "say cold", nil)); err != nil || out.Result.Output != "cold" {
		t.Fatalf("cold turn with the claim unanswered: %v %+v", err, out.Result)
	}
	if _, m := scrape(t, b.base+"/metrics", testToken); sample(m, claimFailures) != 2 {
		t.Errorf("claim failures counted %v, want 2", sample(m, claimFailures))
	}
	release()
}

// TestPlatformOwnerSharedStore: replicas sharing one PostgreSQL store are
// kept apart by its lease, not the platform's owner key: after the owner
// lets go, the other replica runs the session cold with its history, and
// the platform's "another replica owns it" answers to its beats do not
// stop the turn (only a Stop does).
func TestPlatformOwnerSharedStore(t *testing.T) {
	db := sharedPostgresURL(t)
	f := platformtest.New(t, platformCred)
	a := startPlatformRunner(t, "AGENTA_RUNNER_REPLICA_ID=replica-a", "AGENTA_RUNNER_DATABASE_URL="+db)
	b := startPlatformRunner(t, "AGENTA_RUNNER_REPLICA_ID=replica-b", "AGENTA_RUNNER_DATABASE_URL="+db)
	defer logCalls(t, f)
	if _, err := a.client.Run(t.Context(), agentaRequest(f, "pg1", "say the password is swordfish", nil)); err != nil {
		t.Fatal(err)
	}
	kill := `{"sessionId":"pg1","projectId":"` + f.ProjectID + `"}`
	resp := post(t, a.base+"/kill", kill) // releases the warm harness and the lease
	resp.Body.Close()

	type result struct {
		out platformtest.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.client.Run(t.Context(), agentaRequest(f, "pg1", "history\nsleep 1h", nil))
		done <- result{out, err}
	}()
	// Three running beats: the replies to the first two (the owner is
	// replica-a, not current) were handled before the third was sent.
	f.Wait(t, "three running beats from replica-b", func() bool {
		select {
		case r := <-done:
			t.Fatalf("the turn on replica-b ended early: %v %+v", r.err, r.out.Result)
		default:
		}
		beats, _ := beatsOf(f, "replica-b")
		return len(beats) >= 3
	})
	if o := f.Owner("pg1"); o != "replica-a" {
		t.Fatalf("platform owner %q, want replica-a still", o)
	}
	// The fake agent marks a prompt that replays a transcript (the
	// session's history, read from the shared log) before it sleeps: kill
	// only once the prompt is there, however slowly a loaded machine
	// starts the harness.
	f.Wait(t, "the replayed prompt in replica-b's session log", func() bool {
		return strings.Contains(sessionLog(t, b.base, "pg1"), "[replayed]")
	})
	resp = post(t, b.base+"/kill", kill)
	resp.Body.Close()
	r := platformtest.WaitFor(t, "the killed turn's result", done)
	// Killed, not stopped from the platform (that ends ok, cancelled).
	if r.err == nil || !strings.Contains(r.err.Error(), "kill") {
		t.Fatalf("turn on replica-b ended %v %+v; want the kill", r.err, r.out.Result)
	}
	// The fake agent marks a prompt that replays a transcript: the
	// session's history, read from the shared log.
	if evs, _ := json.Marshal(r.out.Events); !strings.Contains(string(evs), "[replayed]") {
		t.Errorf("replica-b did not replay the session's history: %s", evs)
	}
}

// sessionLog is a session's event log as /v1 serves it (NDJSON).
func sessionLog(t *testing.T, base, id string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/sessions/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sharedPostgresURL is RUNNER_TEST_POSTGRES_URL on a fresh schema, for
// replicas sharing one store, or skips without it.
func sharedPostgresURL(t *testing.T) string { return storetest.PostgresSchema(t) }

func logCalls(t *testing.T, f *platformtest.Fake) {
	if t.Failed() {
		for _, c := range f.Calls() {
			t.Logf("call %s %s %d %.200s", c.Method, c.Path, c.Status, c.Body)
		}
	}
}
