package harness

import (
	"errors"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
)

func TestPiTools(t *testing.T) {
	for _, c := range []struct {
		raw, script string
		ok          bool
	}{
		{``, "", false},
		{`null`, "", false},
		{`["read","bash","grep"]`, "#!/bin/sh\nexec '/opt/pi/bin/pi' --tools read,bash,grep \"$@\"\n", true},
		{`[]`, "#!/bin/sh\nexec '/opt/pi/bin/pi' --no-tools \"$@\"\n", true},
	} {
		f, launcher, ok, err := piTools([]byte(c.raw), "/opt/pi/bin/pi", "/home/s")
		if err != nil || ok != c.ok || string(f.Content) != c.script {
			t.Errorf("piTools(%s) = %q %v %v", c.raw, f.Content, ok, err)
		}
		if ok && (launcher != "/home/s/.pi/agent/pi-with-tools" || f.Mode != 0o755) {
			t.Errorf("launcher %s mode %o", launcher, f.Mode)
		}
	}
	if _, _, _, err := piTools([]byte(`["read","rm_rf"]`), "/opt/pi/bin/pi", "/home/s"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("unknown tool: %v", err)
	}
}
