package tenanttest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// askPrompt is the fake harness's script of an asking turn: it asks
// permission for "deploy", then says after-deploy.
const askPrompt = "permission deploy\nsay after-deploy"

// askingTurn runs a turn of the fake harness that asks permission for
// "deploy" under an ask-everything policy and returns the interaction id
// it raised.
func askingTurn(t *testing.T, r *runner, session string) string {
	t.Helper()
	id, _ := askingTurnWith(t, r, session, nil)
	return id
}

// askingTurnWith is askingTurn with fields merged into the request; it
// returns the interaction id and the tool call id the request is about.
func askingTurnWith(t *testing.T, r *runner, session string, fields map[string]any) (interactionID, toolCallID string) {
	t.Helper()
	req := fake(askPrompt, map[string]any{"sessionId": session, "permissions": map[string]any{"default": "ask"}})
	for k, v := range fields {
		req[k] = v
	}
	tr := r.stream(t, req)
	if !tr.Result.OK || tr.Result.StopReason != "paused" {
		t.Fatalf("want a paused turn, got %+v\n%s", tr.Result, tr.Raw)
	}
	for _, ev := range tr.Events {
		if ev.Type == wire.EventInteractionReq {
			var p struct {
				ToolCallID string `json:"toolCallId"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			return ev.ID, p.ToolCallID
		}
	}
	t.Fatalf("no interaction_request event:\n%s", tr.Raw)
	return "", ""
}

// pendingOf is GET /v1/sessions/{id}'s pendingInteractions.
func pendingOf(t *testing.T, r *runner, session string) []string {
	t.Helper()
	status, body := r.call(t, "GET", "/v1/sessions/"+session, nil)
	if status != 200 {
		t.Fatalf("GET session %s = %d %s", session, status, body)
	}
	var v struct {
		Pending []struct {
			InteractionID string `json:"interactionId"`
		} `json:"pendingInteractions"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range v.Pending {
		ids = append(ids, p.InteractionID)
	}
	return ids
}

// TestFaultApprovalSurvivesRestart: a turn pauses for a person's
// approval, then the runner restarts before the person answers (a
// deploy, a crash, a scale-down). The paused turn's state lived only in
// the runner's memory, so the answer over /v1 was refused with 409 and
// the decision was lost. What must hold: after the restart the session
// still lists the pending interaction; approving it resumes the turn
// with the decision applied (the harness is told yes) and the turn
// completes; denying it (in another session) gives a denied result and
// the harness is told no; an unknown interaction id is 404 naming it.
func TestFaultApprovalSurvivesRestart(t *testing.T) {
	needBwrap(t)
	r := start(t)
	yes := askingTurn(t, r, "approve-me")
	no := askingTurn(t, r, "deny-me")
	r.restart(t)

	if got := pendingOf(t, r, "approve-me"); len(got) != 1 || got[0] != yes {
		t.Fatalf("pending after restart = %v, want [%s]", got, yes)
	}
	status, body := r.call(t, "POST", "/v1/sessions/approve-me/interactions/int_nosuch", map[string]any{"approved": true})
	if status != 404 || !strings.Contains(string(body), "int_nosuch") {
		t.Fatalf("unknown interaction: %d %s, want 404 naming it", status, body)
	}

	status, body = r.call(t, "POST", "/v1/sessions/approve-me/interactions/"+yes, map[string]any{"approved": true})
	var res wire.Result
	_ = json.Unmarshal(body, &res)
	if status != 200 || !res.OK || res.StopReason == "paused" || !strings.Contains(res.Output, "permission selected:yes-once") {
		t.Fatalf("approve after restart: %d %s\nlog:\n%s", status, body, r.Log())
	}
	if got := pendingOf(t, r, "approve-me"); len(got) != 0 {
		t.Fatalf("pending after the answer = %v, want none", got)
	}

	status, body = r.call(t, "POST", "/v1/sessions/deny-me/interactions/"+no, map[string]any{"approved": false})
	res = wire.Result{}
	_ = json.Unmarshal(body, &res)
	if status != 200 || res.StopReason == "paused" || strings.Contains(res.Output, "selected:yes") || !denied(res, body) {
		t.Fatalf("deny after restart: %d %s", status, body)
	}
}

// denied reports whether the result shows the call refused: a denied
// tool_result, or the harness told no.
func denied(res wire.Result, body []byte) bool {
	for _, ev := range res.Events {
		if ev.Denied {
			return true
		}
	}
	return strings.Contains(res.Output, "permission selected:no") || strings.Contains(string(body), `"denied":true`)
}
