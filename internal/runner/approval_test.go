package runner_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
)

// askReq is a turn whose harness asks permission for "deploy" under an
// ask-everything policy, then reports its pid.
func askReq(session string) req {
	return req{session: session, messages: []string{"permission deploy\npid"}}
}

func ask(r req) *wire.Request {
	w := r.wire()
	w.Permissions = &wire.Permissions{Default: "ask"}
	return w
}

func (e *env) run(t *testing.T, w *wire.Request) turnResult {
	t.Helper()
	return collect(t, e.svc, w)
}

// paused runs the asking turn and returns the interaction it raised.
func paused(t *testing.T, e *env, session string) (turnResult, string, string) {
	t.Helper()
	first := e.run(t, ask(askReq(session)))
	if first.res.StopReason != "paused" || !first.res.OK {
		t.Fatalf("want a paused result, got %+v", first.res)
	}
	for _, ev := range first.events {
		if ev.Type == wire.EventInteractionReq {
			var p struct {
				ToolCallID string `json:"toolCallId"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			return first, ev.ID, p.ToolCallID
		}
	}
	t.Fatal("no interaction_request event")
	return first, "", ""
}

// approvalTail is the compatible reply: the conversation so far plus a
// tool_result {approved} for the paused call.
func approvalTail(session, toolCallID string, approved bool) *wire.Request {
	w := ask(askReq(session))
	out, _ := json.Marshal(map[string]bool{"approved": approved})
	w.Messages = append(w.Messages,
		wire.Message{Role: "assistant", Content: wire.MessageContent{Blocks: []wire.ContentBlock{{Type: "tool_call", ToolCallID: toolCallID, ToolName: "deploy", Input: json.RawMessage(`{"command":"deploy"}`)}}}},
		wire.Message{Role: "user", Content: wire.MessageContent{Blocks: []wire.ContentBlock{{Type: "tool_result", ToolCallID: toolCallID, ToolName: "deploy", Output: out}}}})
	return w
}

func TestApproveViaRunTailContinuesTheSameHarness(t *testing.T) {
	e := newEnv(t)
	_, _, callID := paused(t, e, "s")
	if e.svc.Warm() != 1 {
		t.Fatal("paused session not kept warm")
	}
	v, _ := e.svc.GetSession(t.Context(), sk("s"))
	if len(v.Interactions) != 1 {
		t.Fatalf("pending interactions %+v", v.Interactions)
	}
	second := e.run(t, approvalTail("s", callID, true))
	if second.mode != "resume" || !second.res.OK || second.res.StopReason != "end_turn" {
		t.Fatalf("resume: mode %q result %+v", second.mode, second.res)
	}
	if !strings.Contains(second.res.Output, "permission selected:yes-once") || second.pid == "" {
		t.Fatalf("output %q", second.res.Output)
	}
	var responded bool
	for _, ev := range second.events {
		if ev.Type == wire.EventInteractionRes {
			responded = true
		}
	}
	if !responded {
		t.Error("no interaction_response event")
	}
	v, _ = e.svc.GetSession(t.Context(), sk("s"))
	if len(v.Interactions) != 0 {
		t.Errorf("still pending after approval: %+v", v.Interactions)
	}
}

func TestRejectViaRunTail(t *testing.T) {
	e := newEnv(t)
	_, _, callID := paused(t, e, "s")
	second := e.run(t, approvalTail("s", callID, false))
	if !strings.Contains(second.res.Output, "permission selected:no") {
		t.Fatalf("output %q", second.res.Output)
	}
	var denied bool
	for _, ev := range second.events {
		if ev.Type == wire.EventToolResult && ev.Denied {
			denied = true
		}
	}
	if !denied {
		t.Error("no denied tool_result")
	}
}

func TestApproveViaV1(t *testing.T) {
	e := newEnv(t)
	first, iid, _ := paused(t, e, "s")
	turn, err := e.svc.Decide(t.Context(), sk("s"), iid, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := turn.Run(t.Context(), nil)
	if err != nil || !strings.Contains(res.Output, "permission selected:yes-once") {
		t.Fatalf("%q %v", res.Output, err)
	}
	_ = first
	// A second decision on the same interaction changes nothing.
	if _, err := e.svc.Decide(t.Context(), sk("s"), iid, false); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("double decision: %v", err)
	}
	if _, err := e.svc.Decide(t.Context(), sk("s"), "int_unknown", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown interaction: %v", err)
	}
}

// TestApproveAfterTheParkExpiredResumesCold: the warm park of a paused
// turn ends (its pool's approval TTL, shorter here than the service's),
// and the answer, still within the approval's TTL, resumes the turn on a
// new harness with the decision replayed.
func TestApproveAfterTheParkExpiredResumesCold(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) {
		c.Pools = map[string]runner.PoolConfig{"local": {Enabled: true, Max: 8, IdleTTL: time.Minute, ApprovalTTL: 5 * time.Minute}}
	})
	first, iid, _ := paused(t, e, "s")
	e.clock.Advance(4 * time.Minute)
	if e.svc.Warm() != 1 {
		t.Fatal("approval park expired before its 5 minute TTL")
	}
	e.clock.Advance(2 * time.Minute)
	waitFor(t, func() bool { return e.svc.Warm() == 0 })
	turn, err := e.svc.Decide(t.Context(), sk("s"), iid, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := turn.Run(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A new harness re-issued the call and the stored decision allowed it.
	if !strings.Contains(res.Output, "[replayed]") || !strings.Contains(res.Output, "permission selected:yes-once") {
		t.Fatalf("cold resume output %q", res.Output)
	}
	if m := pidRE.FindStringSubmatch(res.Output); m == nil || m[1] == first.pid {
		t.Errorf("cold resume ran on pid %v, first on %s", m, first.pid)
	}
}

// TestApproveAfterTheTTLIsRefused: the approval's TTL runs on the
// service's clock. An answer after it is refused, naming the interaction,
// its expiry and the setting; one just before it is taken.
func TestApproveAfterTheTTLIsRefused(t *testing.T) {
	e := newEnv(t)
	_, late, _ := paused(t, e, "late")
	e.clock.Advance(9 * time.Minute)
	_, early, _ := paused(t, e, "early")
	e.clock.Advance(2 * time.Minute) // late: 11 min, early: 2
	_, err := e.svc.Decide(t.Context(), sk("late"), late, true)
	if !errors.Is(err, errdefs.ErrUnprocessable) {
		t.Fatalf("answer 11 minutes into a 10 minute TTL: %v, want ErrUnprocessable", err)
	}
	for _, want := range []string{late, "expired", "AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	turn, err := e.svc.Decide(t.Context(), sk("early"), early, true)
	if err != nil {
		t.Fatalf("answer 2 minutes into a 10 minute TTL: %v", err)
	}
	if res, err := turn.Run(t.Context(), nil); err != nil || !strings.Contains(res.Output, "permission selected:yes-once") {
		t.Fatalf("%q %v", res.Output, err)
	}
}

func TestKillWhileWaitingForApproval(t *testing.T) {
	e := newEnv(t)
	paused(t, e, "s")
	e.svc.Kill(t.Context(), "s", "p")
	if e.svc.Warm() != 0 {
		t.Fatal("kill left the paused harness running")
	}
}

func TestAskWithoutSessionIsDeniedVisibly(t *testing.T) {
	e := newEnv(t)
	w := ask(req{messages: []string{"permission deploy"}})
	r := e.run(t, w)
	if r.res.StopReason == "paused" || !strings.Contains(r.res.Output, "permission selected:no") {
		t.Fatalf("%+v", r.res)
	}
}
