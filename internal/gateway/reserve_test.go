package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/gateway"
)

// A reservation is handed to a harness started before its tenant: until
// it is bound its placeholder reaches nothing; once bound it reaches the
// tenant's endpoint with the tenant's key; once released, nothing again.
func TestReservationReachesNothingUntilBound(t *testing.T) {
	rc := &recorder{}
	up := httptest.NewServer(rc)
	defer up.Close()
	g := newGateway(t, nil, up.Listener.Addr().String())
	res := g.Reserve()
	defer res.Release()
	if strings.Contains(res.BaseURL, up.URL) || !strings.HasPrefix(res.Placeholder, "runner-key-") {
		t.Fatalf("reservation %+v", res)
	}
	call := func() int {
		resp, _ := do(t, "GET", res.BaseURL+"/v1/models", nil, "Authorization", "Bearer "+res.Placeholder)
		return resp.StatusCode
	}
	if code := call(); code != http.StatusForbidden {
		t.Fatalf("an unbound reservation answered %d, want 403", code)
	}
	if seen, _ := rc.requests(); len(seen) != 0 {
		t.Fatalf("the upstream was reached before the bind: %v", seen[0].URL)
	}

	rt, err := res.Bind(gateway.Spec{BaseURL: up.URL + "/v1/", Credentials: []gateway.Credential{openai}})
	if err != nil {
		t.Fatal(err)
	}
	if rt.BaseURL != res.BaseURL+"/v1" || rt.Placeholders["sk-real"] != res.Placeholder {
		t.Fatalf("bound route %q %v, want the reservation's %q %q", rt.BaseURL, rt.Placeholders, res.BaseURL, res.Placeholder)
	}
	if code := call(); code != http.StatusOK {
		t.Fatalf("a bound reservation answered %d", code)
	}
	seen, _ := rc.requests()
	if len(seen) != 1 || seen[0].URL.Path != "/v1/models" || seen[0].Header.Get("Authorization") != "Bearer sk-real" {
		t.Fatalf("upstream saw %v", seen)
	}
	if _, err := res.Bind(gateway.Spec{BaseURL: up.URL, Credentials: []gateway.Credential{openai}}); err == nil {
		t.Error("a reservation bound twice")
	}

	rt.Release()
	if code := call(); code != http.StatusForbidden {
		t.Fatalf("a released reservation answered %d, want 403", code)
	}
	if _, err := res.Bind(gateway.Spec{BaseURL: up.URL, Credentials: []gateway.Credential{openai}}); err == nil {
		t.Error("a released reservation bound")
	}
}

func TestReservationTakesOneKey(t *testing.T) {
	g := newGateway(t, nil)
	res := g.Reserve()
	defer res.Release()
	if _, err := res.Bind(gateway.Spec{BaseURL: "https://api.example.com", Credentials: []gateway.Credential{openai, gemini}}); err == nil {
		t.Fatal("a reservation bound two keys to its one placeholder")
	}
}

// A harness started before its tenant names a placeholder model; the
// bound route renames it, in the body and in Gemini's path, to the
// tenant's, and leaves other text alone.
func TestReservationRenamesTheModel(t *testing.T) {
	rc := &recorder{}
	up := httptest.NewServer(rc)
	defer up.Close()
	g := newGateway(t, nil, up.Listener.Addr().String())
	res := g.Reserve()
	defer res.Release()
	rt, err := res.Bind(gateway.Spec{BaseURL: up.URL, Credentials: []gateway.Credential{gemini}, Models: map[string]string{"placeholder-model": "tenant-model"}})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"placeholder-model","messages":[{"content":"placeholder-model-ish text"}]}`
	resp, _ := do(t, "POST", rt.BaseURL+"/v1beta/models/placeholder-model:streamGenerateContent", strings.NewReader(body), "X-Goog-Api-Key", res.Placeholder)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	seen, bodies := rc.requests()
	if len(seen) != 1 || seen[0].URL.Path != "/v1beta/models/tenant-model:streamGenerateContent" {
		t.Fatalf("upstream saw %v", seen)
	}
	if want := `{"model":"tenant-model","messages":[{"content":"placeholder-model-ish text"}]}`; bodies[0] != want {
		t.Errorf("upstream body %s, want %s", bodies[0], want)
	}
}
