package config_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/config"
)

// TestRunnerPathsNameEveryDir: each directory the configuration names is
// one sandboxes must not see, so a *Dir setting added without a place in
// RunnerPaths fails here rather than being readable from every sandbox.
func TestRunnerPathsNameEveryDir(t *testing.T) {
	c, _, err := config.Load([]string{
		"HOME=/home/u",
		"AGENTA_RUNNER_DATA_DIR=/srv/runner",
		"AGENTA_RUNNER_HARNESS_DIR=/opt/harnesses",
		"AGENTA_RUNNER_STORE_URL=/mnt/store",
		"AGENTA_RUNNER_LOCAL_HIDE=/etc/runner.env",
	})
	if err != nil {
		t.Fatal(err)
	}
	paths := c.RunnerPaths()
	for _, want := range []string{"/srv/runner", "/opt/harnesses", "/mnt/store", "/etc/runner.env", "/srv/runner/run"} {
		if !slices.Contains(paths, want) {
			t.Errorf("RunnerPaths() = %q: %s missing", paths, want)
		}
	}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.String || !strings.HasSuffix(f.Name, "Dir") {
			continue
		}
		if dir := v.Field(i).String(); !slices.Contains(paths, dir) {
			t.Errorf("Config.%s (%s) is not in RunnerPaths() %q", f.Name, dir, paths)
		}
	}
}

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
