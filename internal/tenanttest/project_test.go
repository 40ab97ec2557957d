package tenanttest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Per-project tokens of the runners that test them.
const (
	tokenA = "tenanttest-project-a-token-0c1d2e"
	tokenB = "tenanttest-project-b-token-7a8b9c"
)

// TestAttackSessionIDAcrossProjects: tenant B sends tenant A's sessionId
// with its own projectId and only its newest message, hoping the runner
// finds "the" session and replays its conversation into B's harness (the
// ledger and log were keyed by session id alone). What must hold: the
// same id in two projects is two sessions — B's harness sees none of A's
// history, and A's session keeps its project, its ledger and its log.
func TestAttackSessionIDAcrossProjects(t *testing.T) {
	needBwrap(t)
	r := start(t)
	const secret = "tenant-a-secret-4471"
	a := r.stream(t, fake("say "+secret, map[string]any{"sessionId": "shared", "projectId": "projA"}))
	if !a.Result.OK {
		t.Fatalf("A's turn failed: %+v", a.Result)
	}
	b := r.stream(t, fake("history", map[string]any{"sessionId": "shared", "projectId": "projB"}))
	if !b.Result.OK {
		t.Fatalf("B's turn failed: %+v", b.Result)
	}
	if strings.Contains(string(b.Raw), secret) {
		t.Fatalf("B's turn carries A's conversation:\n%s", b.Raw)
	}
	if !strings.HasPrefix(b.Text(), "history 0: \n") {
		t.Fatalf("B's harness saw %q, want no earlier prompt", b.Text())
	}

	sa := getSession(t, r, "/v1/sessions/shared?projectId=projA")
	if sa.ProjectID != "projA" || len(sa.Turns) != 1 || sa.LastSeq == 0 {
		t.Fatalf("A's session after B's turn: project %q, %d turns, last seq %d; want projA, 1 turn", sa.ProjectID, len(sa.Turns), sa.LastSeq)
	}
	sb := getSession(t, r, "/v1/sessions/shared?projectId=projB")
	if sb.ProjectID != "projB" || len(sb.Turns) != 1 {
		t.Fatalf("B's session: project %q, %d turns; want projB, 1 turn", sb.ProjectID, len(sb.Turns))
	}
	status, body := r.call(t, "GET", "/v1/sessions/shared/events?projectId=projA", nil)
	if status != 200 || !strings.Contains(string(body), secret) || strings.Contains(string(body), "history 1") {
		t.Fatalf("A's log: %d\n%s", status, body)
	}
}

// TestAttackV1ReachesAnotherProject: a caller scoped to project B lists
// sessions and names A's session id on every /v1 route. What must hold:
// the list holds none of A's sessions, and the id with B's scope is 404
// on GET, events, DELETE and interactions — A's session stays untouched.
func TestAttackV1ReachesAnotherProject(t *testing.T) {
	needBwrap(t)
	r := start(t)
	if a := r.stream(t, fake("say hi", map[string]any{"sessionId": "only-a", "projectId": "projA"})); !a.Result.OK {
		t.Fatalf("A's turn failed: %+v", a.Result)
	}
	status, body := r.call(t, "GET", "/v1/sessions?projectId=projB", nil)
	if status != 200 || strings.Contains(string(body), "only-a") {
		t.Fatalf("B's list: %d %s", status, body)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/sessions/only-a?projectId=projB"},
		{"GET", "/v1/sessions/only-a/events?projectId=projB"},
		{"POST", "/v1/sessions/only-a/interactions/int_x?projectId=projB"},
		{"DELETE", "/v1/sessions/only-a?projectId=projB"},
	} {
		var in any
		if c.method == "POST" {
			in = map[string]any{"approved": true}
		}
		if status, body := r.call(t, c.method, c.path, in); status != 404 {
			t.Errorf("%s %s = %d %s, want 404", c.method, c.path, status, body)
		}
	}
	if s := getSession(t, r, "/v1/sessions/only-a?projectId=projA"); s.Status != "active" || len(s.Turns) != 1 {
		t.Fatalf("A's session after B's calls: %+v", s)
	}
}

// TestAttackProjectTokenOtherProject: a tenant holding its project's
// token names another project on every route it may call (body projectId
// or runContext.project on /stream and /run, /kill, ?projectId= and the
// header on /v1) or calls an operator route. What must hold: 403 with
// nothing run or read, while the same token works for its own project
// (named, or implied when the request names none) and the runner's own
// token still reaches every project.
func TestAttackProjectTokenOtherProject(t *testing.T) {
	needBwrap(t)
	r := start(t, "AGENTA_RUNNER_PROJECT_TOKENS=projA="+tokenA+",projB="+tokenB)
	if a := r.stream(t, fake("say for A only", map[string]any{"sessionId": "s1", "projectId": "projA"})); !a.Result.OK {
		t.Fatalf("A's turn (runner token) failed: %+v", a.Result)
	}
	attacks := []struct {
		method, path string
		body         any
		header       string
	}{
		{"POST", "/stream", fake("history", map[string]any{"sessionId": "s1", "projectId": "projA"}), ""},
		{"POST", "/run", fake("history", map[string]any{"sessionId": "s1", "projectId": "projA"}), ""},
		{"POST", "/stream", fake("history", map[string]any{"sessionId": "s1", "runContext": map[string]any{"project": map[string]any{"id": "projA"}}}), ""},
		{"POST", "/stream", fake("history", map[string]any{"sessionId": "s1", "projectId": "projB", "runContext": map[string]any{"project": map[string]any{"id": "projA"}}}), ""},
		{"POST", "/kill", map[string]any{"sessionId": "s1", "projectId": "projA"}, ""},
		{"GET", "/v1/sessions?projectId=projA", nil, ""},
		{"GET", "/v1/sessions/s1?projectId=projA", nil, ""},
		{"GET", "/v1/sessions/s1", nil, "projA"},
		{"GET", "/v1/sessions/s1/events?projectId=projA", nil, ""},
		{"DELETE", "/v1/sessions/s1?projectId=projA", nil, ""},
		{"POST", "/v1/sessions/s1/interactions/int_x?projectId=projA", map[string]any{"approved": true}, ""},
		{"GET", "/subscription-status", nil, ""},
	}
	for _, c := range attacks {
		status, body := callAs(t, r, tokenB, c.method, c.path, c.body, c.header)
		if status != http.StatusForbidden {
			t.Errorf("B's token: %s %s (header %q) = %d %.300s, want 403", c.method, c.path, c.header, status, body)
		}
	}
	// B's token on its own project: the project named or implied.
	status, body := callAs(t, r, tokenB, "POST", "/run", fake("history", map[string]any{"sessionId": "s1"}), "")
	var res struct {
		OK     bool   `json:"ok"`
		Output string `json:"output"`
	}
	_ = json.Unmarshal(body, &res)
	if status != 200 || !res.OK || strings.Contains(string(body), "for A only") {
		t.Fatalf("B's own turn: %d %s", status, body)
	}
	status, body = callAs(t, r, tokenB, "GET", "/v1/sessions", nil, "")
	if status != 200 || !strings.Contains(string(body), `"projB"`) || strings.Contains(string(body), "projA") {
		t.Fatalf("B's list: %d %s", status, body)
	}
	if status, body := callAs(t, r, tokenB, "GET", "/v1/sessions/s1?projectId=projB", nil, ""); status != 200 {
		t.Fatalf("B's session: %d %s", status, body)
	}
	if status, body := callAs(t, r, tokenB, "POST", "/kill", map[string]any{"sessionId": "s1", "projectId": "projB"}, ""); status != 200 {
		t.Fatalf("B's kill: %d %s", status, body)
	}
	// A's session is as A left it, and the runner token sees both.
	if s := getSession(t, r, "/v1/sessions/s1?projectId=projA"); s.Status != "active" || len(s.Turns) != 1 {
		t.Fatalf("A's session after B's attempts: %+v", s)
	}
	if status, _ := callAs(t, r, "tenanttest-wrong-token", "GET", "/v1/sessions", nil, ""); status != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d, want 401", status)
	}
	if strings.Contains(r.Log(), tokenA) || strings.Contains(r.Log(), tokenB) {
		t.Fatal("the runner logged a project token")
	}
}

// sessionView is the part of a /v1 session the tests read.
type sessionView struct {
	ID        string `json:"id"`
	ProjectID string `json:"projectId"`
	Status    string `json:"status"`
	LastSeq   int64  `json:"lastSeq"`
	Turns     []struct {
		Status string `json:"status"`
	} `json:"turns"`
}

func getSession(t *testing.T, r *runner, path string) sessionView {
	t.Helper()
	status, body := r.call(t, "GET", path, nil)
	if status != 200 {
		t.Fatalf("GET %s = %d %s", path, status, body)
	}
	var v sessionView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// callAs sends an authenticated request with tok, and project in the
// X-Agenta-Project-Id header when set.
func callAs(t *testing.T, r *runner, tok, method, path string, body any, project string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req := r.request(t, ctx, method, path, body, "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	if project != "" {
		req.Header.Set("X-Agenta-Project-Id", project)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestAttackWorkspaceDefaultProject: the durable workspace of a session
// whose request named no project was filed under the project "default",
// so a tenant whose project is literally "default" (here by its project
// token) sending the same sessionId got that session's files restored
// into its sandbox. What must hold: the empty project and a project
// named "default" keep their workspaces apart.
func TestAttackWorkspaceDefaultProject(t *testing.T) {
	needBwrap(t)
	r := start(t, "AGENTA_RUNNER_PROJECT_TOKENS=default="+tokenA)
	const secret = "operator-file-secret-5519"
	op := r.stream(t, fake("write notes.txt "+secret, map[string]any{"sessionId": "ws"}))
	if !op.Result.OK || !strings.Contains(op.Text(), "write ok") {
		t.Fatalf("the operator's turn: %+v %q", op.Result, op.Text())
	}
	status, body := callAs(t, r, tokenA, "POST", "/run", fake("read notes.txt", map[string]any{"sessionId": "ws"}), "")
	if status != 200 {
		t.Fatalf("the default project's turn: %d %s", status, body)
	}
	if strings.Contains(string(body), secret) || !strings.Contains(string(body), "read error") {
		t.Fatalf("the project named default read the empty project's workspace: %s", body)
	}
	// The operator's session still has its file.
	again := r.stream(t, fake("read notes.txt", map[string]any{"sessionId": "ws"}))
	if !strings.Contains(again.Text(), "read ok: "+secret) {
		t.Fatalf("the operator's session lost its file: %q", again.Text())
	}
}
