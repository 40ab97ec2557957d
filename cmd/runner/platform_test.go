package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/platform/platformtest"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
)

const platformCred = "Secret run-credential-0001"

// platformRunner serves the runner against a fake Agenta platform and
// returns a client that calls it as Agenta's Python client does.
func platformRunner(t *testing.T, f *platformtest.Fake, extra ...string) (*platformtest.Client, string) {
	t.Helper()
	r := startPlatformRunner(t, extra...)
	return r.client, r.base
}

// platformServe is one `runner serve` of a test.
type platformServe struct {
	client *platformtest.Client
	base   string
	// stop shuts the runner down and waits for it (its platform mirror
	// delivers what it queued); the test's cleanup also calls it.
	stop func()
}

func startPlatformRunner(t *testing.T, extra ...string) *platformServe {
	t.Helper()
	r, stderr, exited := servePlatformRunner(t, extra...)
	if exited {
		t.Fatalf("runner serve exited at start:\n%s", stderr)
	}
	return r
}

// servePlatformRunner starts `runner serve` on a listener it opens and
// waits until it is healthy, or has exited (then with its stderr).
func servePlatformRunner(t *testing.T, extra ...string) (*platformServe, string, bool) {
	t.Helper()
	ln, base := runnertest.Listen(t)
	env := testEnv(t, append([]string{"AGENTA_RUNNER_TOKEN=" + testToken,
		"AGENTA_RUNNER_PLATFORM_HEARTBEAT_MS=50"}, extra...)...)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var stderr runnertest.SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(withListener(ctx, ln), []string{"serve"}, env, nil, io.Discard, &stderr)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			platformtest.WaitFor(t, "serve to stop", done)
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("runner log (%s):\n%s", env[len(env)-1], stderr.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return &platformServe{client: &platformtest.Client{URL: base, Token: testToken}, base: base, stop: stop}, "", false
			}
		}
		select {
		case <-done:
			return nil, stderr.String(), true
		case <-time.After(20 * time.Millisecond): // polling the new server
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner never became healthy: %v", err)
		}
	}
}

// agentaRequest is a run as Agenta's services send it: no projectId, the
// run credential in the OTLP exporter headers.
func agentaRequest(f *platformtest.Fake, session string, messages any, extra map[string]any) map[string]any {
	if s, ok := messages.(string); ok {
		messages = []map[string]any{{"role": "user", "content": s}}
	}
	r := map[string]any{
		"harness": "fake", "sandbox": "local", "sessionId": session, "messages": messages,
		"telemetry": map[string]any{"exporters": map[string]any{"otlp": map[string]any{
			"endpoint": f.URL + "/otlp/v1/traces", "headers": map[string]string{"authorization": platformCred}}}},
		"runContext": map[string]any{"workflow": map[string]any{"artifact": map[string]any{"id": "wf-1", "slug": "agent"}}},
	}
	for k, v := range extra {
		r[k] = v
	}
	return r
}

func hasRecord(f *platformtest.Fake, session, typ string) func() bool {
	return func() bool {
		for _, r := range f.Records(session) {
			if r.RecordType == typ {
				return true
			}
		}
		return false
	}
}

// TestPlatformRecords: the runner is the only writer of the records the
// web app shows: one per message (deltas merged), the user's prompt
// first, tool records under stable ids, in the reference's order and
// fields; the session row comes from the first heartbeat (base from the
// request's OTLP endpoint), the turn is in the platform's ledger.
func TestPlatformRecords(t *testing.T) {
	f := platformtest.New(t, platformCred)
	r := startPlatformRunner(t)
	c := r.client
	prompt := "think plan\nsay hi there\ntool Read {\"path\":\"x\"} => data\nusage 10 5"
	out, err := c.Run(t.Context(), agentaRequest(f, "rec1", prompt, map[string]any{"permissions": map[string]any{"default": "allow"}}))
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Output != "hi there" {
		t.Errorf("output %q", out.Result.Output)
	}
	for _, ev := range out.Events {
		if ev.Type == wire.EventData && (strings.HasPrefix(ev.Name, "agent-session") || strings.HasPrefix(ev.Name, "audit.")) {
			t.Errorf("runner-only data event on the Agenta stream: %s", ev.Name)
		}
	}
	defer func() {
		if t.Failed() {
			for _, c := range f.Calls() {
				t.Logf("call %s %s %d %.200s", c.Method, c.Path, c.Status, c.Body)
			}
		}
	}()
	f.Wait(t, "the done record", hasRecord(f, "rec1", "done"))
	type row struct {
		Index          int
		Source, Type   string
		Text, ID       string
		StableID, Turn bool
	}
	var got []row
	turn := out.Result.TurnID
	for _, r := range f.Records("rec1") {
		var a struct {
			Text string `json:"text"`
			ID   string `json:"id"`
		}
		_ = json.Unmarshal(r.Attributes, &a)
		got = append(got, row{r.RecordIndex, r.RecordSource, r.RecordType, a.Text, a.ID, r.RecordID != "", r.TurnID == turn})
	}
	want := []row{
		{0, "user", "message", prompt, "", false, true},
		{1, "agent", "thought", "plan", "", false, true},
		{2, "agent", "message", "hi there", "", false, true},
		{3, "agent", "tool_call", "", "call-1", true, true},
		{4, "agent", "tool_result", "", "call-1", true, true},
		{5, "agent", "usage", "", "", false, true},
		{6, "agent", "done", "", "", false, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	f.Wait(t, "three heartbeats", func() bool { return len(f.CallsTo("/sessions/streams/heartbeat")) >= 3 })
	beats := f.CallsTo("/sessions/streams/heartbeat")
	var first, last struct {
		SessionID  string `json:"session_id"`
		TurnID     string `json:"turn_id"`
		IsRunning  bool   `json:"is_running"`
		Name       string `json:"name"`
		References []struct {
			ID, Key string
		} `json:"references"`
	}
	var claim map[string]any
	_ = json.Unmarshal(beats[0].Body, &claim)
	if _, hasTurn := claim["turn_id"]; hasTurn || claim["session_id"] != "rec1" {
		t.Errorf("the first beat is not an owner claim (no turn_id): %s", beats[0].Body)
	}
	_ = json.Unmarshal(beats[1].Body, &first)
	f.Wait(t, "the releasing heartbeat", func() bool {
		b := f.CallsTo("/sessions/streams/heartbeat")
		_ = json.Unmarshal(b[len(b)-1].Body, &last)
		return !last.IsRunning
	})
	r.stop() // delivers everything the mirror queued: no running beat may follow the release
	if b := f.CallsTo("/sessions/streams/heartbeat"); strings.Contains(string(b[len(b)-1].Body), `"is_running":true`) {
		t.Errorf("a running heartbeat followed the release: %s", b[len(b)-1].Body)
	}
	if first.SessionID != "rec1" || first.TurnID != turn || !first.IsRunning || first.Name != "think plan say hi there tool Read {\"path\":\"x\"} => data usage 10 5"[:60] || len(first.References) != 1 || first.References[0].Key != "workflow" {
		t.Errorf("first running heartbeat %s", beats[1].Body)
	}
	for _, call := range f.Calls() {
		if call.Authorization != platformCred {
			t.Errorf("%s %s authenticated as %q, want the run credential verbatim", call.Method, call.Path, call.Authorization)
		}
	}
	f.Wait(t, "turns/complete", func() bool { return len(f.Completed("rec1")) == 1 })
	if n := len(f.CallsTo("/sessions/turns/")); n != 1 {
		t.Errorf("turns ledger starts: %d", n)
	}
}

// TestPlatformStopCancelsTurn: Stop pressed on the platform reaches the
// running turn through its next heartbeat (is_current_turn: false).
func TestPlatformStopCancelsTurn(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	res := make(chan platformtest.Outcome, 1)
	errc := make(chan error, 1)
	go func() {
		out, err := c.Run(t.Context(), agentaRequest(f, "stop1", "say working\nsleep 1h", nil))
		res <- out
		errc <- err
	}()
	f.Wait(t, "a running heartbeat", func() bool {
		return len(f.CallsTo("/sessions/streams/heartbeat")) > 0 && hasRecord(f, "stop1", "message")() == false
	})
	f.Stop("stop1")
	out := platformtest.WaitFor(t, "the turn to stop after Stop", res)
	if err := <-errc; err != nil {
		t.Fatalf("stopped turn: %v", err)
	}
	if out.Result.StopReason != "cancelled" {
		t.Errorf("stopReason %q, want cancelled", out.Result.StopReason)
	}
}

// TestPlatformApprovalAnsweredOnPlatform: a paused approval is created
// on the platform; answered there (mobile, the API's respond flow), the
// resume the platform composes continues the parked turn, and the row is
// resolved.
func TestPlatformApprovalAnsweredOnPlatform(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	perms := map[string]any{"permissions": map[string]any{"default": "ask"}}
	out, err := c.Run(t.Context(), agentaRequest(f, "appr1", "say about to deploy\npermission deploy", perms))
	if err != nil || out.Result.StopReason != "paused" {
		t.Fatalf("first turn: %v %+v", err, out.Result)
	}
	var token string
	for _, ev := range out.Events {
		if ev.Type == wire.EventInteractionReq {
			token = ev.ID
		}
	}
	f.Wait(t, "the interaction row", func() bool { return len(f.Interactions("appr1")) == 1 })
	f.Wait(t, "the paused turn's records", hasRecord(f, "appr1", "done"))
	row := f.Interactions("appr1")[0]
	if row.Token != token || row.Kind != "user_approval" || row.Status != "pending" || !strings.Contains(string(row.Data), `"tool":"deploy"`) {
		t.Fatalf("interaction row %+v (token %s)", row, token)
	}
	msgs, err := f.Respond("appr1", token, true)
	if err != nil {
		t.Fatal(err)
	}
	// The answer matched by its tool call id only (a client that drops
	// the token): the runner still spares the parked row from cancel-stale.
	tail := msgs[len(msgs)-1].Content.Blocks
	tail[len(tail)-1].Output = json.RawMessage(`{"approved":true}`)
	out, err = c.Run(t.Context(), agentaRequest(f, "appr1", msgs, perms))
	if err != nil || out.Result.StopReason == "paused" {
		t.Fatalf("resume: %v %+v", err, out.Result)
	}
	f.Wait(t, "the resume's cancel-stale", func() bool { return len(f.CallsTo("/sessions/interactions/cancel-stale")) == 2 })
	stale := f.CallsTo("/sessions/interactions/cancel-stale")
	if len(stale) != 2 || !strings.Contains(string(stale[1].Body), `"tokens":["`+token+`"]`) {
		t.Errorf("the resume's cancel-stale does not spare the answered row: %d calls, last %s", len(stale), stale[len(stale)-1].Body)
	}
	if !strings.Contains(out.Result.Output, "selected:yes-once") {
		t.Errorf("the harness was not given the approval: %q", out.Result.Output)
	}
	f.Wait(t, "the row resolved", func() bool {
		r := f.Interactions("appr1")[0]
		return r.Status == "resolved" && strings.Contains(string(r.Resolution), `"verdict":"approved"`)
	})
}

// TestPlatformDown: with the platform down turns still succeed; the
// calls are retried in the background and all land once it returns.
func TestPlatformDown(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	f.SetDown(true)
	out, err := c.Run(t.Context(), agentaRequest(f, "down1", "say still works", nil))
	if err != nil || out.Result.Output != "still works" {
		t.Fatalf("turn with the platform down: %v %+v", err, out.Result)
	}
	f.Wait(t, "a retried call", func() bool {
		n := 0
		for _, call := range f.CallsTo("/sessions/streams/heartbeat") {
			if call.Status == 503 {
				n++
			}
		}
		return n >= 2
	})
	f.SetDown(false)
	f.Wait(t, "every record after the outage", hasRecord(f, "down1", "done"))
	var types []string
	for _, r := range f.Records("down1") {
		types = append(types, r.RecordType)
	}
	if diff := cmp.Diff([]string{"message", "message", "done"}, types); diff != "" {
		t.Errorf("records after the outage (-want +got):\n%s", diff)
	}
	f.Wait(t, "turns/complete after the outage", func() bool { return len(f.Completed("down1")) == 1 })
}

// TestPlatformCredentialRefresh: the run credential is refreshed with
// GET /access/permissions/check before it expires; later calls use the
// fresh one.
func TestPlatformCredentialRefresh(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, base := platformRunner(t, f, "AGENTA_RUNNER_PLATFORM_REFRESH_MS=150")
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(t.Context(), agentaRequest(f, "cred1", "sleep 1h", nil))
		done <- err
	}()
	f.Wait(t, "a refresh", func() bool {
		for _, call := range f.CallsTo("/access/permissions/check") {
			if call.Status == 200 && call.Authorization == platformCred {
				return true
			}
		}
		return false
	})
	f.Expire(platformCred)
	f.Wait(t, "a heartbeat with the refreshed credential", func() bool {
		for _, call := range f.CallsTo("/sessions/streams/heartbeat") {
			if call.Status == 200 && strings.HasPrefix(call.Authorization, "Secret refreshed-") {
				return true
			}
		}
		return false
	})
	resp := post(t, base+"/kill", `{"sessionId":"cred1","projectId":"`+f.ProjectID+`"}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"killed":1`) {
		t.Fatalf("kill by the session's platform project: %d %s", resp.StatusCode, body)
	}
	<-done
	f.Wait(t, "the records of the killed turn", hasRecord(f, "cred1", "done"))
}

// TestPlatformAttachment: an attachment block's bytes come from the
// platform; an image goes to the harness as an image block.
func TestPlatformAttachment(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	png := []byte("\x89PNG\r\n\x1a\nfake-image-bytes")
	f.AddAttachment("att-1", platformtest.Attachment{Filename: "photo.png", MediaType: "image/png", Data: png})
	f.AddAttachment("att-2", platformtest.Attachment{Filename: "notes.txt", MediaType: "text/plain", Data: []byte("remember the milk")})
	msgs := []map[string]any{{"role": "user", "content": []map[string]any{
		{"type": "attachment", "attachmentId": "att-1", "filename": "photo.png", "mimeType": "image/png", "size": len(png)},
		{"type": "attachment", "attachmentId": "att-2", "filename": "notes.txt", "mimeType": "text/plain", "size": 17},
		{"type": "text", "text": "images\nexec cat attachments/notes.txt\n"},
	}}}
	out, err := c.Run(t.Context(), agentaRequest(f, "att1", msgs, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Result.Output, "images [image/png:32]") || !strings.Contains(out.Result.Output, "remember the milk") {
		t.Errorf("output %q", out.Result.Output)
	}
	var outcomes []string
	for _, ev := range out.Events {
		if ev.Type == wire.EventAttachment {
			outcomes = append(outcomes, ev.AttachmentID+":"+ev.Outcome)
		}
	}
	if diff := cmp.Diff([]string{"att-1:native", "att-2:workspace_only"}, outcomes); diff != "" {
		t.Errorf("attachment_delivery (-want +got):\n%s", diff)
	}
	f.Wait(t, "attachments claimed", func() bool { return len(f.CallsTo("/sessions/attachments/reference")) == 1 })
}

// TestPlatformRefusalInStream: a refusal reaches Agenta's client as the
// runner's message, not as "Agent runner HTTP 422".
func TestPlatformRefusalInStream(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	req := agentaRequest(f, "ref1", "say hi", nil)
	req["harness"] = "nope"
	_, err := c.Run(t.Context(), req)
	if !errors.Is(err, platformtest.ErrRunFailed) || !strings.Contains(err.Error(), `unknown harness "nope"`) {
		t.Fatalf("err %v", err)
	}
}

// TestPlatformClientTool: a client tool (fulfilled by the browser) parks
// the turn with an interaction_request of kind client_tool, mirrored to
// the platform; the browser's output on the next run fulfils the call.
func TestPlatformClientTool(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	tools := map[string]any{"customTools": []map[string]any{{"name": "request_connection", "kind": "client",
		"inputSchema": map[string]any{"type": "object"}, "render": map[string]any{"connect": map[string]any{"provider": "github"}}}}}
	prompt := `mcp agenta-tools request_connection {"provider":"github"}`
	out, err := c.Run(t.Context(), agentaRequest(f, "ct1", prompt, tools))
	if err != nil || out.Result.StopReason != "paused" {
		t.Fatalf("first turn: %v %+v", err, out.Result)
	}
	var req *wire.Event
	for i, ev := range out.Events {
		if ev.Type == wire.EventInteractionReq {
			req = &out.Events[i]
		}
	}
	if req == nil || req.Kind != "client_tool" || !strings.Contains(string(req.Payload), `"connect"`) {
		t.Fatalf("interaction_request %+v", req)
	}
	f.Wait(t, "the client_tool interaction row", func() bool {
		rows := f.Interactions("ct1")
		return len(rows) == 1 && rows[0].Kind == "client_tool" && rows[0].Token == req.ID
	})
	msgs := []map[string]any{
		{"role": "user", "content": prompt},
		{"role": "assistant", "content": []map[string]any{
			{"type": "tool_call", "toolCallId": "tc-1", "toolName": "request_connection", "input": map[string]any{"provider": "github"}},
			{"type": "tool_result", "toolCallId": "tc-1", "toolName": "request_connection", "output": `{"connected":true}`},
		}},
	}
	out, err = c.Run(t.Context(), agentaRequest(f, "ct1", msgs, tools))
	if err != nil || out.Result.StopReason == "paused" {
		t.Fatalf("resume: %v %+v", err, out.Result)
	}
	if !strings.Contains(out.Result.Output, `mcp result: {"connected":true}`) {
		t.Errorf("the call was not fulfilled by the browser's output: %q", out.Result.Output)
	}
}

// TestPlatformTraces: a turn is exported over OTLP/HTTP to the request's
// telemetry endpoint with its headers: invoke_agent, parented on the
// caller's traceparent, then the turn, then each tool call; the result
// carries the trace id.
func TestPlatformTraces(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req := agentaRequest(f, "tr1", "say hi\ntool Read {\"path\":\"x\"} => data\nusage 10 5", map[string]any{
		"permissions": map[string]any{"default": "allow"}, "model": "m1",
		"context": map[string]any{"propagation": map[string]any{"traceparent": "00-" + traceID + "-" + parent + "-01"}},
	})
	out, err := c.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.TraceID != traceID {
		t.Errorf("result traceId %q, want the caller's %s", out.Result.TraceID, traceID)
	}
	f.Wait(t, "the exported trace", func() bool { return len(f.Spans()) >= 3 })
	byName := map[string]platformtest.Span{}
	for _, s := range f.Spans() {
		byName[strings.Fields(s.Name)[0]] = s
		if s.TraceID != traceID || s.Authorization != platformCred {
			t.Errorf("span %s: trace %s auth %q", s.Name, s.TraceID, s.Authorization)
		}
	}
	agent, turn, tool := byName["invoke_agent"], byName["turn"], byName["execute_tool"]
	if agent.ParentID != parent || turn.ParentID != agent.SpanID || tool.ParentID != turn.SpanID {
		t.Errorf("span tree: agent %+v\nturn %+v\ntool %+v", agent, turn, tool)
	}
	if agent.Attributes["gen_ai.agent.name"] != "fake" || agent.Attributes["gen_ai.usage.total_tokens"] != "15" || agent.Attributes["gen_ai.request.model"] != "m1" || agent.Attributes["ag.stop_reason"] != "end_turn" {
		t.Errorf("invoke_agent attributes %v", agent.Attributes)
	}
	if tool.Name != "execute_tool Read" || tool.Attributes["gen_ai.tool.call.id"] != "call-1" || tool.Attributes["output.value"] == "" {
		t.Errorf("tool span %+v", tool)
	}

	// Without telemetry, nothing is exported and no trace id is made up.
	req = agentaRequest(f, "tr2", "say quiet", nil)
	delete(req, "telemetry")
	n := len(f.Spans())
	out, err = c.Run(t.Context(), req)
	if err != nil || out.Result.TraceID != "" {
		t.Fatalf("untraced turn: %v traceId %q", err, out.Result.TraceID)
	}
	if len(f.Spans()) != n {
		t.Errorf("spans exported for a turn without telemetry")
	}
}

// TestPlatformRenderHints: a tool spec's render hint rides its tool_call
// and tool_result events, for the web app's components.
func TestPlatformRenderHints(t *testing.T) {
	f := platformtest.New(t, platformCred)
	c, _ := platformRunner(t, f)
	tools := map[string]any{"permissions": map[string]any{"default": "allow"}, "customTools": []map[string]any{{"name": "Read", "kind": "client",
		"inputSchema": map[string]any{"type": "object"}, "render": map[string]any{"component": "file-card"}}}}
	out, err := c.Run(t.Context(), agentaRequest(f, "rh1", `tool Read {"path":"x"} => data`, tools))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range out.Events {
		if ev.Type == wire.EventToolCall || ev.Type == wire.EventToolResult {
			got = append(got, ev.Type+" "+string(ev.Render))
		}
	}
	want := []string{`tool_call {"component":"file-card"}`, `tool_result {"component":"file-card"}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("render hints (-want +got):\n%s", diff)
	}
}
