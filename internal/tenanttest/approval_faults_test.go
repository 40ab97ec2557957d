package tenanttest

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// webAnswer is the decision as Agenta's web app sends it: a /run with
// the whole conversation, whose last message is the assistant's, holding
// the tool_call and its tool_result {approved, interactionToken}; fields
// are merged over it (the turn's configuration, credentials included).
func webAnswer(session, interactionID, toolCallID string, approved bool, fields map[string]any) map[string]any {
	req := map[string]any{
		"harness": "fake", "sessionId": session, "permissions": map[string]any{"default": "ask"},
		"messages": []any{
			map[string]any{"role": "user", "content": askPrompt},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "tool_call", "toolCallId": toolCallID, "toolName": "deploy", "input": map[string]any{"command": "deploy"}},
				map[string]any{"type": "tool_result", "toolCallId": toolCallID, "toolName": "deploy",
					"output": map[string]any{"approved": approved, "interactionToken": interactionID}},
			}},
		},
	}
	for k, v := range fields {
		req[k] = v
	}
	return req
}

// wantResumed fails the test unless tr is the paused turn carried to its
// end with the approval applied: the harness was told yes and went on.
func wantResumed(t *testing.T, r *runner, what string, tr turn) {
	t.Helper()
	if tr.Status != 200 || !tr.Result.OK || tr.Result.StopReason == "paused" ||
		!strings.Contains(tr.Result.Output, "permission selected:yes-once") || !strings.Contains(tr.Result.Output, "after-deploy") {
		t.Fatalf("%s: want the turn resumed with the approval applied, got %d %+v\nlog:\n%s", what, tr.Status, tr.Result, r.Log())
	}
}

// TestFaultApprovalWebAnswerAfterRestart: the runner restarts while a
// turn waits for approval, and the person answers in Agenta's web app,
// which sends the decision as the next /run (the web shape), not over
// /v1. What must hold: the answer resumes the parked turn with the
// decision applied, approval and denial alike, and the session has no
// pending interaction left.
func TestFaultApprovalWebAnswerAfterRestart(t *testing.T) {
	needBwrap(t)
	r := start(t)
	yes, yesCall := askingTurnWith(t, r, "web-yes", nil)
	no, noCall := askingTurnWith(t, r, "web-no", nil)
	r.restart(t)

	wantResumed(t, r, "approve after restart", r.stream(t, webAnswer("web-yes", yes, yesCall, true, nil)))
	if got := pendingOf(t, r, "web-yes"); len(got) != 0 {
		t.Fatalf("pending after the answer = %v, want none", got)
	}
	tr := r.stream(t, webAnswer("web-no", no, noCall, false, nil))
	if tr.Status != 200 || tr.Result.StopReason == "paused" || strings.Contains(tr.Result.Output, "selected:yes") || !denied(tr.Result, tr.Raw) {
		t.Fatalf("deny after restart: %d %+v", tr.Status, tr.Result)
	}
	if got := pendingOf(t, r, "web-no"); len(got) != 0 {
		t.Fatalf("pending after the denial = %v, want none", got)
	}
}

// TestFaultApprovalAnswerAfterTTL: a person answers over /v1 after the
// approval's TTL (here 1 ms, and a restart in between, so the wait is
// certainly longer). What must hold: 422 naming the interaction, that it
// expired and the setting; the web app's /run answer still resumes the
// turn (cold), as README says.
func TestFaultApprovalAnswerAfterTTL(t *testing.T) {
	needBwrap(t)
	r := start(t, "AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS=1")
	id, call := askingTurnWith(t, r, "late", nil)
	r.restart(t)

	status, body := r.call(t, "POST", "/v1/sessions/late/interactions/"+id, map[string]any{"approved": true})
	if status != 422 || !bytes.Contains(body, []byte(id)) || !bytes.Contains(body, []byte("expired")) || !bytes.Contains(body, []byte("AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS")) {
		t.Fatalf("answer after the TTL: %d %s, want 422 naming the interaction, its expiry and the setting", status, body)
	}
	wantResumed(t, r, "/run answer after the TTL", r.stream(t, webAnswer("late", id, call, true, nil)))
}

// Secrets of the credentials test, searched for on disk.
const (
	modelSecret    = "sk-tenanttest-model-key-7d1e40aa"
	platformSecret = "Bearer tenanttest-platform-credential-3b9f"
)

// TestFaultApprovalWithCredentialsAfterRestart: a turn whose request
// carried credentials (a model key, the caller's platform credential in
// the telemetry headers) pauses, and the runner restarts. The runner
// never writes secrets to disk, so it cannot resume that turn on its
// own. What must hold: neither secret is in any file of the data dir
// while the turn waits; the /v1 answer is refused (409) telling the
// client to send the decision by /run with the credentials, never a turn
// resumed without its keys; the /run answer carrying them resumes it.
func TestFaultApprovalWithCredentialsAfterRestart(t *testing.T) {
	needBwrap(t)
	// No platform calls: the credential only has to ride the request. No
	// disk quota: the data dir is searched below, and a quota's sparse
	// image would be read whole (4 GiB).
	r := start(t, "AGENTA_RUNNER_PLATFORM=off", "AGENTA_RUNNER_LOCAL_DISK_MB=0")
	secrets := map[string]any{
		"modelConnection": map[string]any{"provider": "openai", "deployment": "direct",
			"credentials": []any{map[string]any{"binding": map[string]any{"kind": "environment", "name": "OPENAI_API_KEY"}, "value": modelSecret, "usage": "local_use"}}},
		"telemetry": map[string]any{"exporters": map[string]any{"otlp": map[string]any{
			"endpoint": "http://127.0.0.1:1/otlp/v1/traces", "headers": map[string]any{"authorization": platformSecret}}}},
	}
	id, call := askingTurnWith(t, r, "keyed", secrets)
	r.restart(t)
	wantNotOnDisk(t, r.DataDir, modelSecret, platformSecret)

	status, body := r.call(t, "POST", "/v1/sessions/keyed/interactions/"+id, map[string]any{"approved": true})
	if status != 409 || !bytes.Contains(body, []byte("credentials")) || !bytes.Contains(body, []byte("/run")) || !bytes.Contains(body, []byte(call)) {
		t.Fatalf("/v1 answer after restart: %d %s, want 409 asking for the decision by /run with the credentials", status, body)
	}
	if got := pendingOf(t, r, "keyed"); len(got) != 1 || got[0] != id {
		t.Fatalf("pending after the refused answer = %v, want [%s]", got, id)
	}
	wantResumed(t, r, "/run answer with the credentials", r.stream(t, webAnswer("keyed", id, call, true, secrets)))
}

// wantNotOnDisk fails the test if any file under dir holds one of the
// secrets.
func wantNotOnDisk(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // a file that vanished while walking; links are not followed
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds the secret %q", p, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFaultApprovalOversizedRequest: a paused turn whose request is
// larger than the 4 MiB a resume record keeps (here a 5 MiB agentsMd).
// What must hold, as README says: while the runner holds the paused turn
// a /v1 answer resumes it; after a restart the /v1 answer is refused
// (409) saying the configuration was not kept and how to answer instead,
// and that answer, the web app's /run, resumes the turn.
func TestFaultApprovalOversizedRequest(t *testing.T) {
	needBwrap(t)
	r := start(t)
	big := map[string]any{"agentsMd": strings.Repeat("x", 5<<20)}

	held, _ := askingTurnWith(t, r, "big-held", big)
	status, body := r.call(t, "POST", "/v1/sessions/big-held/interactions/"+held, map[string]any{"approved": true})
	var res wire.Result
	_ = json.Unmarshal(body, &res)
	if status != 200 || !res.OK || !strings.Contains(res.Output, "permission selected:yes-once") {
		t.Fatalf("/v1 answer while the runner holds the turn: %d %.2000s", status, body)
	}

	id, call := askingTurnWith(t, r, "big-restarted", big)
	r.restart(t)
	status, body = r.call(t, "POST", "/v1/sessions/big-restarted/interactions/"+id, map[string]any{"approved": true})
	if status != 409 || !bytes.Contains(body, []byte("too large")) || !bytes.Contains(body, []byte("/run")) {
		t.Fatalf("/v1 answer after restart: %d %s, want 409 saying the request was too large to keep and to answer by /run", status, body)
	}
	wantResumed(t, r, "/run answer after restart", r.stream(t, webAnswer("big-restarted", id, call, true, big)))
}
