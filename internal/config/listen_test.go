package config_test

import (
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/config"
)

func TestMetricsAddr(t *testing.T) {
	c, _, err := config.Load([]string{"AGENTA_RUNNER_METRICS_ADDR=:9464"})
	if err != nil || c.HTTP.MetricsAddr != ":9464" {
		t.Fatalf("%q %v", c.HTTP.MetricsAddr, err)
	}
	for _, bad := range []string{"9464", "host:port", "0.0.0.0:99999"} {
		_, _, err := config.Load([]string{"AGENTA_RUNNER_METRICS_ADDR=" + bad})
		if err == nil || !strings.Contains(err.Error(), "AGENTA_RUNNER_METRICS_ADDR") || !strings.Contains(err.Error(), "host:port") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
