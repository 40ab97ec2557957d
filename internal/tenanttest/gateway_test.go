package tenanttest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// realKey is the model key the tenant's agent tries to get back.
const realKey = "sk-tenant-real-key-9d1c7e04b6a2"

// echoModel is an OpenAI-compatible upstream that, like FastAPI's 422 in
// the vLLM/LiteLLM stack, repeats back whatever it is sent: every query
// value, every header and the body. It records where it saw the real key.
type echoModel struct {
	mu    sync.Mutex
	where []string
}

func (m *echoModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	for name, vs := range r.Header {
		if strings.Contains(strings.Join(vs, " "), realKey) {
			m.where = append(m.where, "header "+name)
		}
	}
	if strings.Contains(r.URL.RawQuery, realKey) {
		m.where = append(m.where, "query")
	}
	if strings.Contains(string(body), realKey) {
		m.where = append(m.where, "body")
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
	w.WriteHeader(http.StatusUnprocessableEntity)
	_ = json.NewEncoder(w).Encode(map[string]any{"detail": []any{map[string]any{
		"msg": "invalid input", "query": r.URL.Query(), "headers": r.Header, "input": string(body)}}})
}

func (m *echoModel) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.where...)
}

// keyTurn starts a runner and an echoing upstream, runs prompt as the
// fake harness with an opaque_http OpenAI key for that upstream, and
// fails the test if the real key shows up in the turn's stream, the
// session's event log or the runner's log.
func keyTurn(t *testing.T, session, prompt string) (turn, *runner, *echoModel) {
	t.Helper()
	model := &echoModel{}
	up := httptest.NewServer(model)
	t.Cleanup(up.Close)
	// The operator opens the loopback model server.
	r := start(t, "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW="+up.Listener.Addr().String())
	tr := r.stream(t, fake(prompt, map[string]any{"sessionId": session, "modelConnection": map[string]any{
		"provider": "openai", "deployment": "custom",
		"endpoint":    map[string]any{"baseUrl": up.URL + "/v1"},
		"environment": map[string]any{"OPENAI_BASE_URL": up.URL + "/v1"},
		"credentials": []any{map[string]any{"binding": map[string]any{"kind": "environment", "name": "OPENAI_API_KEY"}, "value": realKey, "usage": "opaque_http"}},
	}}))
	if tr.Status != 200 || !tr.Result.OK {
		t.Fatalf("turn: %d %s", tr.Status, tr.Raw)
	}
	if strings.Contains(string(tr.Raw), realKey) {
		t.Errorf("the real key is in the turn's stream:\n%s", tr.Raw)
	}
	code, evlog := r.call(t, "GET", "/v1/sessions/"+session+"/events", nil)
	if code != 200 {
		t.Fatalf("event log: %d %s", code, evlog)
	}
	if strings.Contains(string(evlog), realKey) {
		t.Errorf("the real key is in the session's event log:\n%s", evlog)
	}
	if strings.Contains(r.Log(), realKey) {
		t.Errorf("the real key is in the runner's log:\n%s", r.Log())
	}
	return tr, r, model
}

// TestAttackGatewayMisplacedKey: the agent puts its placeholder
// key where the upstream echoes it back (a query value, an extra header,
// the body), hoping the gateway swaps the real key in there as it did in
// every header and query value. Must hold: each such request is refused
// by the gateway with an error naming the placement, and the upstream gets
// the key only in Authorization, never where it would echo it; the key
// appears nowhere the tenant can read.
func TestAttackGatewayMisplacedKey(t *testing.T) {
	needBwrap(t)
	tr, _, model := keyTurn(t, "gw-misplaced", strings.Join([]string{
		"http OPENAI_BASE_URL OPENAI_API_KEY /models?limit=$OPENAI_API_KEY",
		"http OPENAI_BASE_URL OPENAI_API_KEY /models X-Debug:$OPENAI_API_KEY",
		`http OPENAI_BASE_URL OPENAI_API_KEY /chat/completions -- {"messages":[{"role":"user","content":"$OPENAI_API_KEY"}]}`,
	}, "\n"))
	text := tr.Text()
	for _, where := range []string{`query parameter "limit"`, "header X-Debug", "the request body"} {
		if !strings.Contains(text, "http 400 runner key gateway: the placeholder key of OPENAI_API_KEY is in "+where+"; the gateway substitutes it only in header Authorization (Bearer <key>)") {
			t.Errorf("no refusal naming %s:\n%s", where, text)
		}
	}
	// The body is checked as it streams: that request's headers (the key
	// in Authorization) went out before the gateway aborted it.
	for _, where := range model.seen() {
		if where != "header Authorization" {
			t.Errorf("the upstream received the key in %s", where)
		}
	}
}

// TestAttackGatewayEchoedKey: the agent sends its placeholder
// where it belongs and the upstream echoes the Authorization header it
// received (the real key) in a response header and the body. Must hold:
// the gateway scrubs the response, the agent reads back only its
// placeholder, and the substitution is audited in the runner's log by
// session, variable and placement, without the key.
func TestAttackGatewayEchoedKey(t *testing.T) {
	needBwrap(t)
	tr, r, model := keyTurn(t, "gw-echo", "http OPENAI_BASE_URL OPENAI_API_KEY /models\nenv")
	text := tr.Text()
	if !strings.Contains(text, `"Authorization":["Bearer runner-key-`) {
		t.Errorf("the echo did not come back scrubbed to the placeholder:\n%s", text)
	}
	if got := model.seen(); len(got) != 1 || got[0] != "header Authorization" {
		t.Errorf("the upstream saw the key in %v, want header Authorization only", got)
	}
	var audit string
	for _, line := range strings.Split(r.Log(), "\n") {
		if strings.Contains(line, "credential substituted") {
			audit = line
		}
	}
	for _, want := range []string{"gw-echo", "OPENAI_API_KEY", "header Authorization (Bearer <key>)"} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit line %q lacks %q:\n%s", audit, want, r.Log())
		}
	}
}
