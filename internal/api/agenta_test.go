package api_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// TestWebShapeApprovalResume: Agenta's web app resumes a paused approval
// with the whole conversation and the decision on the last message, an
// assistant message holding the tool_call and the tool_result
// {approved, interactionToken}. The parked turn continues.
func TestWebShapeApprovalResume(t *testing.T) {
	e := newEnv(t)
	prompt := "say about to deploy\npermission deploy"
	code, body := e.do(t, "POST", "/run", sessionBody("web1", "fake", prompt, `"permissions":{"default":"ask"}`), nil)
	var first wire.Result
	if code != 200 || json.Unmarshal(body, &first) != nil || first.StopReason != "paused" {
		t.Fatalf("first turn: %d %s", code, body)
	}
	var token, callID string
	for _, ev := range first.Events {
		if ev.Type == wire.EventInteractionReq {
			token = ev.ID
			var p struct {
				ToolCallID string `json:"toolCallId"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			callID = p.ToolCallID
		}
	}
	if token == "" || callID == "" {
		t.Fatalf("no interaction_request: %s", body)
	}
	p, _ := json.Marshal(prompt)
	resume := `{"harness":"fake","sessionId":"web1","projectId":"p1","permissions":{"default":"ask"},"messages":[` +
		`{"role":"user","content":` + string(p) + `},` +
		`{"role":"assistant","content":[{"type":"text","text":"about to deploy"},{"type":"tool_call","toolCallId":"` + callID + `","toolName":"deploy","input":{"command":"deploy"}},` +
		`{"type":"tool_result","toolCallId":"` + callID + `","toolName":"deploy","output":{"approved":true,"interactionToken":"` + token + `"}}]}]}`
	code, body = e.do(t, "POST", "/run", resume, nil)
	var res wire.Result
	if code != 200 || json.Unmarshal(body, &res) != nil || !res.OK || res.StopReason == "paused" {
		t.Fatalf("resume: %d %s", code, body)
	}
	if !bytes.Contains(body, []byte("selected:yes-once")) {
		t.Errorf("the harness was not told the approval: %s", body)
	}
	responded := false
	for _, ev := range res.Events {
		if ev.Type == wire.EventInteractionRes && ev.ID == token {
			responded = true
		}
	}
	if !responded {
		t.Errorf("no interaction_response for %s: %s", token, body)
	}
}

// TestKillWithoutRunProject: Agenta's services never send projectId on a
// run, and the API's /kill always names one; the turn must still stop.
func TestKillWithoutRunProject(t *testing.T) {
	e := newEnv(t)
	resp, sc := stream(t, e, t.Context(), `{"harness":"fake","sessionId":"noproj","messages":[{"role":"user","content":"pid\nsleep 1h"}]}`)
	defer resp.Body.Close()
	pid := pidOf(t, sc)
	code, body := e.do(t, "POST", "/kill", `{"sessionId":"noproj","projectId":"0198-project"}`, nil)
	if code != 200 || !bytes.Contains(body, []byte(`"killed":1`)) {
		t.Fatalf("kill: %d %s", code, body)
	}
	recs := readAll(t, sc)
	if last := recs[len(recs)-1]; last.Kind != "result" || last.Result.OK {
		t.Fatalf("last record %+v", last)
	}
	waitGone(t, pid)
}
