package kubernetes_test

import (
	"errors"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/kubernetes"
)

// TestHarnessPrefix: the provider tells the harness family where its
// image carries the harnesses (a pod never sees the runner host's harness
// dir), the project image's place by default, and refuses a relative one,
// which would resolve inside the tenant's workspace.
func TestHarnessPrefix(t *testing.T) {
	base := kubernetes.Config{
		REST:      &rest.Config{Host: "https://127.0.0.1:1"},
		Namespace: "sandboxes", Image: "runner:harnesses", Version: "test",
	}
	for _, tc := range []struct {
		prefix, want string
	}{
		{"", kubernetes.DefaultHarnessPrefix},
		{"/srv/harnesses", "/srv/harnesses"},
	} {
		cfg := base
		cfg.HarnessPrefix = tc.prefix
		p, err := kubernetes.New(cfg, nil)
		if err != nil {
			t.Fatalf("New(prefix %q): %v", tc.prefix, err)
		}
		var sp sandbox.Provider = p
		hi, ok := sp.(sandbox.HarnessImage)
		if !ok {
			t.Fatal("the kubernetes provider is not a sandbox.HarnessImage: its pods would look for the host's harness dir")
		}
		if got := hi.HarnessPrefix(); got != tc.want {
			t.Errorf("HarnessPrefix() with %q configured = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	cfg := base
	cfg.HarnessPrefix = "opt/harnesses"
	if _, err := kubernetes.New(cfg, nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("New(relative prefix) = %v, want an invalid-configuration error", err)
	}
}
