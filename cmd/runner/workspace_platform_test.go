package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/platform/platformtest"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace"
)

// TestPlatformSignsTheMounts: with AGENTA_RUNNER_PLATFORM_MOUNTS on, a
// request carrying the platform's credential gets its session and agent
// mounts signed by the platform with that credential; others fall back
// to the configured store.
func TestPlatformSignsTheMounts(t *testing.T) {
	f := platformtest.New(t, platformCred)
	cfg := config.Config{DataDir: t.TempDir(), Workspace: config.Workspace{PlatformMounts: true}, Platform: config.Platform{On: true}}
	configured, err := workspaceResolver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := platformWorkspaces(cfg, configured)
	b, _ := json.Marshal(agentaRequest(f, "s-1", "hi", nil))
	var req wire.Request
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	stores, ok, err := res.Resolve(t.Context(), workspace.Target{SessionID: "s-1", AgentID: workspace.AgentID(&req), Request: &req})
	if err != nil || !ok {
		t.Fatalf("resolve: %v %v", ok, err)
	}
	if stores.Agent == nil || len(stores.Keepers) != 2 {
		t.Fatalf("stores: %+v", stores)
	}
	for i, k := range stores.Keepers {
		l, err := k.Lease(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if l.Bucket != "agenta-mounts" || !strings.HasPrefix(l.Prefix, "mounts/") || l.SessionToken == "" || time.Until(l.ExpiresAt) < time.Hour || !l.Insecure {
			t.Fatalf("lease %d: %+v", i, l)
		}
	}
	signs := 0
	for _, c := range f.Calls() {
		if strings.Contains(c.Path, "/mounts") {
			signs++
			if c.Authorization != platformCred {
				t.Fatalf("signed with %q, not the request's credential", c.Authorization)
			}
		}
	}
	if signs != 2 {
		t.Fatalf("%d sign calls, want 2 (session and agent)", signs)
	}
	// Not from the platform: the configured store.
	plain := &wire.Request{SessionID: "s-2"}
	stores, ok, err = res.Resolve(t.Context(), workspace.Target{SessionID: "s-2", Request: plain})
	if err != nil || !ok || len(stores.Keepers) != 0 || !strings.HasPrefix(stores.Session.String(), "file://") {
		t.Fatalf("plain request: %+v %v %v", stores, ok, err)
	}
}
