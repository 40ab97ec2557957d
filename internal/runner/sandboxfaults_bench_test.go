package runner_test

import (
	"fmt"
	"testing"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
)

// BenchmarkDaytonaVanishedWarmTurn is the time from a warm session's sandbox
// vanishing (silently, connections left hanging) to a successful turn:
// the fallback to a fresh sandbox inside the same turn, history replayed.
// Reused at once, so no probe runs first: the loss shows when the prompt
// cannot be delivered. DaytonaColdTurn is the baseline in the same run: a first
// turn of a new session, one create.
func BenchmarkDaytonaVanishedWarmTurn(b *testing.B) {
	fake := daytonatest.New(b, daytonatest.Options{})
	e := newRemoteEnv(b, fake, nil, func(c *runner.Config) { c.WarmProbeIdle = -1 })
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		s := fmt.Sprintf("vanish-%d", i)
		first, err := e.svc.Run(b.Context(), req{session: s, messages: []string{"say one"}}.wire(), nil)
		if err != nil || !first.OK {
			b.Fatalf("warm-up turn: %+v %v", first, err)
		}
		sess, err := e.st.GetSession(b.Context(), sk(s))
		if err != nil {
			b.Fatal(err)
		}
		fake.Vanish(sess.SandboxID)
		b.StartTimer()
		res, err := e.svc.Run(b.Context(), req{session: s, messages: []string{"say one", first.Output, "say two"}}.wire(), nil)
		if err != nil || !res.OK {
			b.Fatalf("turn after the sandbox vanished: %+v %v", res, err)
		}
	}
}

func BenchmarkDaytonaColdTurn(b *testing.B) {
	fake := daytonatest.New(b, daytonatest.Options{})
	e := newRemoteEnv(b, fake, nil)
	for i := 0; b.Loop(); i++ {
		res, err := e.svc.Run(b.Context(), req{session: fmt.Sprintf("cold-%d", i), messages: []string{"say one"}}.wire(), nil)
		if err != nil || !res.OK {
			b.Fatalf("cold turn: %+v %v", res, err)
		}
	}
}
