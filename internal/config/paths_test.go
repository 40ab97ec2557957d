package config_test

import (
	"testing"

	"github.com/agentrunner/runner/internal/config"
)

func TestStoreDir(t *testing.T) {
	for raw, want := range map[string]string{
		"":                   "/srv/runner/workspaces",
		"/mnt/store/":        "/mnt/store",
		"file:///mnt/files":  "/mnt/files",
		"off":                "",
		"s3://k:s@h/b":       "",
		"file://host/x":      "",
		"file:relative/path": "",
	} {
		c, _, _ := config.Load([]string{"AGENTA_RUNNER_DATA_DIR=/srv/runner", "AGENTA_RUNNER_STORE_URL=" + raw})
		if got := c.StoreDir(); got != want {
			t.Errorf("StoreDir(%q) = %q, want %q", raw, got, want)
		}
	}
}
