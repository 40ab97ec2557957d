package river

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// TestWebhookClientRefusesAtDialTime: the webhook client checks the
// address it dials, whatever the URL's host was when it was submitted:
// the host's loopback is refused before a byte is sent, unless the
// operator allowlisted the host; a redirect is not followed.
func TestWebhookClientRefusesAtDialTime(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusFound)
		}
	}))
	defer srv.Close()
	for _, url := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		_, err := webhookClient(nil).Post(url, "application/json", strings.NewReader("{}"))
		if !errors.Is(err, egress.ErrRefused) {
			t.Fatalf("POST %s: %v, want refused", url, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback server got %d requests", n)
	}
	resp, err := webhookClient([]string{"127.0.0.1"}).Post(srv.URL+"/redirect", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("allowlisted host: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits.Load() != 1 {
		t.Fatalf("status %d after %d requests: the redirect was followed", resp.StatusCode, hits.Load())
	}
}
