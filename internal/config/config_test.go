package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/config"
	"github.com/google/go-cmp/cmp"
)

func TestDefaults(t *testing.T) {
	c, warnings, err := config.Load([]string{"HOME=/home/u"})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("err %v warnings %v", err, warnings)
	}
	got := map[string]any{
		"addr": c.Addr(), "providers": c.EnabledProviders, "default": c.DefaultProvider, "isolation": c.Local.Isolation,
		"data": c.DataDir, "keepalive": c.Sessions.KeepAlive, "pool": c.Sessions.PoolMax, "ttl": c.Sessions.TTL, "approval": c.Sessions.ApprovalTTL,
		"limit": c.HTTP.ConcurrencyLimit, "body": c.HTTP.MaxBodyBytes, "history": c.Sessions.HistoryMaxChars, "ping": c.HTTP.PingInterval,
	}
	want := map[string]any{
		"addr": "127.0.0.1:8765", "providers": []string{"local"}, "default": "local", "isolation": "bwrap",
		"data": "/home/u/.local/state/runner", "keepalive": true, "pool": 8, "ttl": time.Minute, "approval": 10 * time.Minute,
		"limit": 1000, "body": int64(32 << 20), "history": 100000, "ping": 15 * time.Second,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
	if err := c.RequireServe(); err == nil || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Errorf("serve without a token: %v", err)
	}
}

func TestEveryProblemReportedTogether(t *testing.T) {
	_, _, err := config.Load([]string{
		"AGENTA_RUNNER_PORT=0",
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=local,,e2b,local",
		"AGENTA_RUNNER_LOCAL_ISOLATION=chroot",
		"AGENTA_RUNNER_HARNESS_BAD-NAME=x",
		"AGENTA_RUNNER_HARNESS_QUOTE=\"unterminated",
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"AGENTA_RUNNER_PORT", "empty entry", `unknown provider "e2b"`, `lists "local" twice`, "AGENTA_RUNNER_LOCAL_ISOLATION", "AGENTA_RUNNER_HARNESS_BAD-NAME", "AGENTA_RUNNER_HARNESS_QUOTE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestDaytonaSettings(t *testing.T) {
	_, _, err := config.Load([]string{"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=local,daytona"})
	if err == nil || !strings.Contains(err.Error(), "DAYTONA_API_KEY") {
		t.Fatalf("daytona without a key: %v", err)
	}
	c, warnings, err := config.Load([]string{
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=local,daytona", "SANDBOX_AGENT_PROVIDER=daytona",
		"AGENTA_RUNNER_DAYTONA_API_KEY=k", "DAYTONA_AUTOSTOP=1", "AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS=120000",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultProvider != "daytona" || c.Daytona.APIKey != "k" || c.Daytona.AutoStopMinutes != 1 || c.Daytona.AutoDeleteMinutes != 30 || !c.Daytona.OpaqueSecrets {
		t.Errorf("daytona config %+v default %s", c.Daytona, c.DefaultProvider)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "not below DAYTONA_AUTOSTOP") {
		t.Errorf("warnings %v", warnings)
	}
	if !strings.Contains(c.Summary(), "daytona_key=set(1 chars)") || strings.Contains(c.Summary(), "=k ") {
		t.Errorf("summary not redacted: %s", c.Summary())
	}
}

func TestTimersNeverFireNow(t *testing.T) {
	c, warnings, err := config.Load([]string{"AGENTA_RUNNER_SESSION_TTL_MS=soon", "AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS=-5", "AGENTA_RUNNER_SESSION_POOL_MAX=x"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Sessions.TTL != time.Minute || c.Limits.RunIdleTimeout != 30*time.Minute || c.Sessions.PoolMax != 8 || len(warnings) != 3 {
		t.Errorf("ttl %v idle %v pool %d warnings %v", c.Sessions.TTL, c.Limits.RunIdleTimeout, c.Sessions.PoolMax, warnings)
	}
}

// Every timer setting at 0: the limits docs/configuration.md calls optional are off; the
// others must fire, so 0 keeps the default with one warning naming the
// setting (it used to become 1 ms, and a zero run limit failed every turn
// at once).
func TestZeroTimers(t *testing.T) {
	for _, tc := range []struct {
		key  string
		get  func(config.Config) time.Duration
		want time.Duration // at 0
	}{
		{"AGENTA_RUNNER_RUN_TOTAL_TIMEOUT_MS", func(c config.Config) time.Duration { return c.Limits.RunTotalTimeout }, 0},
		{"AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS", func(c config.Config) time.Duration { return c.Limits.RunIdleTimeout }, 0},
		{"AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS", func(c config.Config) time.Duration { return c.Limits.RunTTFBTimeout }, 0},
		{"AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS", func(c config.Config) time.Duration { return c.Daytona.IdleTTL }, 0},
		{"AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS", func(c config.Config) time.Duration { return c.Daytona.ReapInterval }, 0},
		{"AGENTA_RUNNER_WORKSPACE_CHECKPOINT_MS", func(c config.Config) time.Duration { return c.Workspace.CheckpointEvery }, 30 * time.Second},
		{"AGENTA_RUNNER_SESSION_TTL_MS", func(c config.Config) time.Duration { return c.Sessions.TTL }, time.Minute},
		{"AGENTA_RUNNER_SESSION_APPROVAL_TTL_MS", func(c config.Config) time.Duration { return c.Sessions.ApprovalTTL }, 10 * time.Minute},
		{"AGENTA_RUNNER_TOOL_CALL_TIMEOUT_MS", func(c config.Config) time.Duration { return c.Limits.ToolCallTimeout }, 30 * time.Minute},
		{"AGENTA_AGENT_TOOLS_TIMEOUT", func(c config.Config) time.Duration { return c.Tools.Timeout }, 30 * time.Second},
		{"AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS", func(c config.Config) time.Duration { return c.HTTP.ShutdownTimeout }, 10 * time.Second},
		{"AGENTA_RUNNER_STREAM_PING_MS", func(c config.Config) time.Duration { return c.HTTP.PingInterval }, 15 * time.Second},
		{"AGENTA_RUNNER_PLATFORM_HEARTBEAT_MS", func(c config.Config) time.Duration { return c.Platform.HeartbeatInterval }, 30 * time.Second},
		{"AGENTA_RUNNER_PLATFORM_REFRESH_MS", func(c config.Config) time.Duration { return c.Platform.RefreshInterval }, 5 * time.Minute},
	} {
		c, warnings, err := config.Load([]string{tc.key + "=0"})
		if err != nil {
			t.Fatalf("%s=0: %v", tc.key, err)
		}
		if got := tc.get(c); got != tc.want {
			t.Errorf("%s=0: %v, want %v", tc.key, got, tc.want)
		}
		wantWarn := 0
		if tc.want != 0 {
			wantWarn = 1
		}
		if len(warnings) != wantWarn || wantWarn == 1 && !strings.Contains(warnings[0], tc.key) {
			t.Errorf("%s=0: warnings %q, want %d naming it", tc.key, warnings, wantWarn)
		}
	}
}

func TestHarnessOverrides(t *testing.T) {
	c, _, err := config.Load([]string{`AGENTA_RUNNER_HARNESS_MYAGENT=/opt/my agent/bin --acp "two words"`, "AGENTA_RUNNER_HARNESS_CLAUDE=/usr/local/bin/claude-acp", "AGENTA_RUNNER_HARNESS_DIR=/h"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/opt/my", "agent/bin", "--acp", "two words"}, c.Harnesses["myagent"].Command); diff != "" {
		t.Error(diff)
	}
	if h, ok := c.Harnesses["claude"]; !ok || h.Command[0] != "/usr/local/bin/claude-acp" {
		t.Errorf("claude override %+v", h)
	}
	if _, ok := c.Harnesses["dir"]; ok || c.HarnessDir != "/h" {
		t.Error("AGENTA_RUNNER_HARNESS_DIR taken for a harness")
	}
}

func TestEmptyValuesAreUnset(t *testing.T) {
	c, _, err := config.Load([]string{"AGENTA_RUNNER_HOST=", "AGENTA_RUNNER_PORT=  "})
	if err != nil || c.Addr() != "127.0.0.1:8765" {
		t.Fatalf("%v %s", err, c.Addr())
	}
}

func TestDaytonaReapInterval(t *testing.T) {
	for _, tc := range []struct {
		env      string
		want     time.Duration
		warnings int
	}{
		{"", 10 * time.Minute, 0},
		{"AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS=0", 0, 0},
		{"AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS=120000", 2 * time.Minute, 0},
		{"AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS=500", time.Minute, 1},
		{"AGENTA_RUNNER_DAYTONA_REAP_INTERVAL_MS=soon", 10 * time.Minute, 1},
	} {
		env := []string{}
		if tc.env != "" {
			env = append(env, tc.env)
		}
		c, warnings, err := config.Load(env)
		if err != nil {
			t.Fatal(err)
		}
		if c.Daytona.ReapInterval != tc.want || len(warnings) != tc.warnings {
			t.Errorf("%q: interval %s warnings %v, want %s and %d warnings", tc.env, c.Daytona.ReapInterval, warnings, tc.want, tc.warnings)
		}
	}
}
