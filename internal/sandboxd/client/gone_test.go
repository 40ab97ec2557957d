package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox"
)

// A proxy that answers 502 for a sandbox that was deleted: with a Gone
// check the call ends at the first retry, naming the lost sandbox,
// instead of retrying for a minute; without one it retries every attempt.
func TestClientStopsRetryingAGoneSandbox(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "sandbox not found or not running", http.StatusBadGateway)
	}))
	defer proxy.Close()
	var asked atomic.Int32
	gone := func(ctx context.Context) error {
		asked.Add(1)
		return fmt.Errorf("daytona sandbox sb-1 was deleted: %w", sandbox.ErrGone)
	}
	c := New(Config{BaseURL: proxy.URL, Token: testToken, Sleep: noSleep, Attempts: 30, Gone: gone})
	_, err := c.Health(t.Context())
	if !errors.Is(err, sandbox.ErrGone) || hits.Load() != 1 || asked.Load() != 1 {
		t.Fatalf("Health of a gone sandbox: %v after %d requests, %d checks; want ErrGone after 1 request", err, hits.Load(), asked.Load())
	}
	// Later calls know at once.
	if _, err := c.Health(t.Context()); !errors.Is(err, sandbox.ErrGone) || asked.Load() != 1 {
		t.Errorf("second call: %v, %d checks", err, asked.Load())
	}

	// A sandbox that still exists: the check says so and retrying goes on.
	hits.Store(0)
	alive := New(Config{BaseURL: proxy.URL, Token: testToken, Sleep: noSleep, Attempts: 5,
		Gone: func(context.Context) error { return nil }})
	if _, err := alive.Health(t.Context()); errors.Is(err, sandbox.ErrGone) || hits.Load() != 5 {
		t.Errorf("live sandbox: %v after %d requests, want 5 attempts", err, hits.Load())
	}
}
