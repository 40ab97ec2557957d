package runner_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/wire"
)

// TestModelKeysNeverEnterTheSandbox: the harness sees a placeholder key
// and a base URL on the runner's gateway; the model endpoint receives the
// real key; the placeholder is useless once the session ends.
func TestModelKeysNeverEnterTheSandbox(t *testing.T) {
	var gotAuth []string
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer sk-real-secret" {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"models":["m1"]}`))
	}))
	defer model.Close()
	// The test's model server is on loopback: the operator opens it.
	eg, err := egress.New([]string{model.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(nil, eg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	e := newEnv(t, func(c *runner.Config) { c.Gateway, c.Egress = g, eg; c.KeepAlive = false })
	w := req{session: "s", messages: []string{"env\nhttp OPENAI_BASE_URL OPENAI_API_KEY /models"}}.wire()
	w.ModelConnection = &wire.ModelConnection{Provider: "openai", Deployment: "direct",
		Endpoint:    &wire.Endpoint{BaseURL: model.URL + "/v1"},
		Environment: map[string]string{"OPENAI_BASE_URL": model.URL + "/v1"},
		Credentials: []wire.Credential{{Binding: wire.Binding{Kind: "environment", Name: "OPENAI_API_KEY"}, Value: "sk-real-secret", Usage: "opaque_http"}}}
	out := e.runW(t, w)
	if strings.Contains(out, "sk-real-secret") || strings.Contains(out, "OPENAI_BASE_URL="+model.URL) {
		t.Fatalf("the sandbox saw the real key or endpoint:\n%s", out)
	}
	if !strings.Contains(out, "OPENAI_API_KEY=runner-key-") || !strings.Contains(out, `http 200 {"models":["m1"]}`) {
		t.Fatalf("the harness could not use its placeholder through the gateway:\n%s", out)
	}
	if len(gotAuth) != 1 || gotAuth[0] != "Bearer sk-real-secret" {
		t.Fatalf("model endpoint saw %v", gotAuth)
	}
}
