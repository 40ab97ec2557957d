package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/config"
)

// TestFuseModeRefusedAtBoot: fuse mode is refused at boot, naming the
// fix, where it cannot work; sync mode (the default) builds no mounter.
func TestFuseModeRefusedAtBoot(t *testing.T) {
	s3URL := "s3://k:s@127.0.0.1:9000/bucket?insecure=1"
	for _, c := range []struct {
		name string
		cfg  config.Config
		path string // PATH, when it matters
		want string
	}{
		{"daytona", config.Config{EnabledProviders: []string{"local", "daytona"}, Workspace: config.Workspace{Mode: "fuse", StoreURL: s3URL}}, "", "Daytona"},
		{"directory store", config.Config{EnabledProviders: []string{"local"}, Workspace: config.Workspace{Mode: "fuse"}}, "", "is a directory"},
		{"file store", config.Config{EnabledProviders: []string{"local"}, Workspace: config.Workspace{Mode: "fuse", StoreURL: "/var/lib/ws"}}, "", "is a directory"},
		{"no store", config.Config{EnabledProviders: []string{"local"}, Workspace: config.Workspace{Mode: "fuse", StoreURL: "off"}}, "", "needs a store"},
		{"no rclone", config.Config{EnabledProviders: []string{"local"}, Workspace: config.Workspace{Mode: "fuse", StoreURL: s3URL}, DataDir: t.TempDir()}, t.TempDir(), "apt-get install rclone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.path != "" {
				t.Setenv("PATH", c.path)
			}
			m, err := workspaceMounter(c.cfg, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), c.want) || m != nil {
				t.Fatalf("got %v, %v; want a refusal containing %q", m, err, c.want)
			}
		})
	}
	if m, err := workspaceMounter(config.Config{EnabledProviders: []string{"local", "daytona"}, Workspace: config.Workspace{Mode: "sync"}}, slog.New(slog.DiscardHandler)); m != nil || err != nil {
		t.Fatalf("sync mode: %v, %v; want no mounter", m, err)
	}
}

// TestWorkspaceModeSetting: the mode is sync unless fuse is set, and
// anything else is refused.
func TestWorkspaceModeSetting(t *testing.T) {
	for v, want := range map[string]string{"": "sync", "fuse": "fuse", "FUSE": "fuse", "sync": "sync"} {
		cfg, _, err := config.Load([]string{"AGENTA_RUNNER_WORKSPACE_MODE=" + v})
		if err != nil || cfg.Workspace.Mode != want {
			t.Fatalf("%q: %q, %v; want %q", v, cfg.Workspace.Mode, err, want)
		}
	}
	_, _, err := config.Load([]string{"AGENTA_RUNNER_WORKSPACE_MODE=mount"})
	if err == nil || !strings.Contains(err.Error(), "AGENTA_RUNNER_WORKSPACE_MODE") {
		t.Fatalf("unknown mode: %v", err)
	}
}
