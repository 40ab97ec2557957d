package runner_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
)

// After park (stop) and resume (start), a Daytona sandbox runs in a fresh
// pid namespace where the pid numbers from before the stop belong to
// strangers (the fake puts toolbox stand-ins there). The same sandbox
// resumes (one start, no create), the harness reloads its session
// natively, the files written before the stop are there, and no stranger
// was signalled.
func TestDaytonaResumeFromStoppedKillsNoStranger(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	msgs := []string{"write notes.txt before-the-stop\nsay remember otter"}
	first := e.turn(t, req{session: "s", messages: msgs}.wire())
	if !first.res.OK || !strings.Contains(first.res.Output, "write ok") {
		t.Fatalf("first turn: %+v", first.res)
	}
	e.clock.Advance(3 * time.Minute) // idle TTL: park
	waitFor(t, func() bool { return fake.Count(routeStop) == 1 })
	fake.ResetCalls()

	msgs = append(msgs, first.res.Output, "read notes.txt\nhistory")
	resumed := e.turn(t, req{session: "s", messages: msgs}.wire())
	if fake.Count(routeStart) != 1 || fake.Count(routeCreate) != 0 || resumed.mode != "load" {
		t.Fatalf("resume: mode %q starts %d creates %d; calls %v", resumed.mode, fake.Count(routeStart), fake.Count(routeCreate), fake.Calls())
	}
	if !strings.Contains(resumed.res.Output, "read ok: before-the-stop") || !strings.Contains(resumed.res.Output, "remember otter") {
		t.Errorf("resumed turn lost the files or the session: %q", resumed.res.Output)
	}
	sess, err := e.st.GetSession(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	placed, running := fake.Toolbox(sess.SandboxID)
	if len(placed) < 2 || !slices.Equal(placed, running) {
		t.Errorf("toolbox stand-ins at %v, still running %v: the resumed sandbox killed a stranger", placed, running)
	}
}
