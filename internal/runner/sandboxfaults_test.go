package runner_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/wire"
)

// After park (stop) and resume (start), a Daytona sandbox runs in a fresh
// pid namespace where the pid numbers from before the stop belong to
// strangers (the fake puts toolbox stand-ins there). The same sandbox
// resumes (one start, no create), the harness reloads its session
// natively, the files written before the stop are there, and no stranger
// was signalled.
func TestDaytonaResumeFromStoppedKillsNoStranger(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end turns over the fake Daytona API: skipped under -short")
	}
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
	sess, err := e.st.GetSession(t.Context(), sk("s"))
	if err != nil {
		t.Fatal(err)
	}
	placed, running := fake.Toolbox(sess.SandboxID)
	if len(placed) < 2 || !slices.Equal(placed, running) {
		t.Errorf("toolbox stand-ins at %v, still running %v: the resumed sandbox killed a stranger", placed, running)
	}
}

func sandboxOf(t *testing.T, e *remoteEnv, session string) string {
	t.Helper()
	sess, err := e.st.GetSession(t.Context(), sk(session))
	if err != nil {
		t.Fatal(err)
	}
	return sess.SandboxID
}

func hasEvent(r turnResult, name string) bool {
	for _, ev := range r.events {
		if ev.Name == name {
			return true
		}
	}
	return false
}

// A warm session whose sandbox is deleted out of band: the next turn
// succeeds in the same call, on a fresh sandbox with the history
// replayed. Reused at once (no probe), the lost sandbox shows when the
// prompt cannot be delivered; after an idle spell the probe finds it
// before.
func TestDaytonaVanishedWhileWarm(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the fake Daytona retries: skipped under -short")
	}
	for _, probe := range []bool{false, true} {
		t.Run(map[bool]string{false: "undelivered", true: "probed"}[probe], func(t *testing.T) {
			fake := daytonatest.New(t, daytonatest.Options{})
			e := newRemoteEnv(t, fake, nil, func(c *runner.Config) {
				c.WarmProbeIdle = -1
				if probe {
					c.WarmProbeIdle = time.Nanosecond
				}
			})
			msgs := []string{"say remember otter"}
			first := e.turn(t, req{session: "s", messages: msgs}.wire())
			lost := sandboxOf(t, e, "s")
			fake.Vanish(lost) // silently: the warm session's stream hangs

			msgs = append(msgs, first.res.Output, "say again")
			start := time.Now()
			again := e.turn(t, req{session: "s", messages: msgs}.wire())
			t.Logf("vanished warm sandbox to a successful turn: %s", time.Since(start))
			if !again.res.OK || again.mode != "replay" || !strings.Contains(again.res.Output, "again") {
				t.Fatalf("turn after the sandbox vanished: ok %v mode %q out %q", again.res.OK, again.mode, again.res.Output)
			}
			if fake.Count(routeCreate) != 2 || sandboxOf(t, e, "s") == lost {
				t.Errorf("creates %d, sandbox %s (lost %s)", fake.Count(routeCreate), sandboxOf(t, e, "s"), lost)
			}
			if got := hasEvent(again, "agent-session.fallback"); got == probe {
				t.Errorf("fallback event %v, want %v (the probe should catch it first: %v)", got, !probe, probe)
			}
		})
	}
}

// A parked (stopped) session's sandbox deleted out of band: the next turn
// creates a fresh one and replays the history.
func TestDaytonaVanishedWhileParked(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the fake Daytona retries: skipped under -short")
	}
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	msgs := []string{"say remember otter"}
	first := e.turn(t, req{session: "s", messages: msgs}.wire())
	e.clock.Advance(3 * time.Minute)
	waitFor(t, func() bool { return fake.Count(routeStop) == 1 })
	fake.Remove(sandboxOf(t, e, "s"))
	msgs = append(msgs, first.res.Output, "say again")
	again := e.turn(t, req{session: "s", messages: msgs}.wire())
	if !again.res.OK || again.mode != "replay" || !strings.Contains(again.res.Output, "again") || fake.Count(routeCreate) != 2 {
		t.Fatalf("after the parked sandbox vanished: ok %v mode %q creates %d out %q", again.res.OK, again.mode, fake.Count(routeCreate), again.res.Output)
	}
}

// A sandbox deleted while the harness is answering: the turn fails fast
// with an error naming the lost sandbox, and the next turn works. Silent
// is a sandbox that dies without a word on the wire (connections hang
// open): the stream's missing heartbeats give it away within seconds.
func TestDaytonaVanishedMidTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the fake Daytona retries: skipped under -short")
	}
	for _, silent := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleted", true: "silent"}[silent], func(t *testing.T) {
			fake := daytonatest.New(t, daytonatest.Options{})
			e := newRemoteEnv(t, fake, nil)
			e.turn(t, req{session: "s", messages: []string{"say hello"}}.wire())
			lost := sandboxOf(t, e, "s")
			talking := make(chan struct{})
			var once sync.Once
			done := make(chan error, 1)
			w := req{session: "s", messages: []string{"say hello", "hello", "say working\nsleep 60s\nsay finished"}}.wire()
			go func() {
				_, err := e.svc.Run(context.Background(), w, func(_ int64, ev wire.Event) {
					if ev.Type == wire.EventMessageDelta && strings.Contains(ev.Delta, "working") {
						once.Do(func() { close(talking) })
					}
				})
				done <- err
			}()
			<-talking
			if silent {
				fake.Vanish(lost)
			} else {
				fake.Remove(lost)
			}
			start := time.Now()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the turn did not fail within 30 s of its sandbox vanishing")
			}
			t.Logf("failed %s after the delete: %v", time.Since(start), err)
			if err == nil || !strings.Contains(err.Error(), lost) || !strings.Contains(err.Error(), "lost") {
				t.Fatalf("turn error = %v, want one naming the lost sandbox %s", err, lost)
			}
			next := e.turn(t, req{session: "s", messages: []string{"say hello", "hello", "say again"}}.wire())
			if !next.res.OK || !strings.Contains(next.res.Output, "again") {
				t.Fatalf("next turn: %+v", next.res)
			}
		})
	}
}

// A harness that cannot reach its model sends nothing: the turn fails at
// the TTFB limit with the model endpoint named.
func TestTTFBNamesTheModelEndpoint(t *testing.T) {
	e := newEnv(t, func(cfg *runner.Config) { cfg.Limits = runner.Limits{TTFB: 300 * time.Millisecond} })
	w := req{messages: []string{"sleep 1h"}}.wire()
	w.ModelConnection = &wire.ModelConnection{Provider: "anthropic", Deployment: "custom", Endpoint: &wire.Endpoint{BaseURL: "http://model.internal:4000/v1?key=secret"}}
	_, err := e.svc.Run(t.Context(), w, nil)
	if err == nil || !strings.Contains(err.Error(), "AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS") || !strings.Contains(err.Error(), "http://model.internal:4000/v1") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("err %v, want the TTFB limit naming the model endpoint (without its query)", err)
	}
}

// TestDaytonaFailedTurnParksTheSandbox: a turn that fails (here its
// harness crashes) stops its Daytona sandbox instead of deleting it, so
// what the agent installed outside the workspace is there for the next
// turn, which resumes that same sandbox; /kill still deletes.
func TestDaytonaFailedTurnParksTheSandbox(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	e.turn(t, req{session: "s", messages: []string{"exec mkdir -p ~/.cache && echo installed > ~/.cache/pkg"}}.wire())
	id := sandboxOf(t, e, "s")
	if res, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"crash 4"}}.wire(), func(int64, wire.Event) {}); err == nil || res.OK {
		t.Fatalf("the crashing turn succeeded: %+v", res)
	}
	if got := fake.Count(routeDelete); got != 0 {
		t.Fatalf("the failed turn deleted its sandbox (%d deletes)", got)
	}
	if st, ok := fake.Sandbox(id); !ok || st.State != "stopped" {
		t.Fatalf("sandbox %s after the failed turn: %+v (present %v), want stopped", id, st, ok)
	}
	next := e.turn(t, req{session: "s", messages: []string{"exec cat ~/.cache/pkg"}}.wire())
	if !next.res.OK || !strings.Contains(next.res.Output, "installed") || sandboxOf(t, e, "s") != id || fake.Count(routeCreate) != 1 {
		t.Fatalf("next turn: ok %v sandbox %s (was %s) creates %d out %q", next.res.OK, sandboxOf(t, e, "s"), id, fake.Count(routeCreate), next.res.Output)
	}
	e.svc.Kill(t.Context(), "s", "p")
	waitFor(t, func() bool { return fake.Count(routeDelete) == 1 })
}
