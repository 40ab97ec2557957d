package harness

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImageCommand(t *testing.T) {
	argv, env, err := ImageCommand("/opt/runner/harnesses", "pi_core")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/opt/runner/harnesses/pi/node_modules/.bin/pi-acp"}, argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if env["PI_ACP_PI_COMMAND"] != "/opt/runner/harnesses/pi/node_modules/.bin/pi" {
		t.Errorf("env %v", env)
	}
	argv, _, _ = ImageCommand("/opt/runner/harnesses", "gemini")
	if diff := cmp.Diff([]string{"/opt/runner/harnesses/gemini/node_modules/.bin/gemini", "--acp"}, argv); diff != "" {
		t.Errorf("gemini argv (-want +got):\n%s", diff)
	}
	if _, _, err := ImageCommand("/opt/runner/harnesses", "nope"); err == nil {
		t.Error("unknown harness accepted")
	}
}
