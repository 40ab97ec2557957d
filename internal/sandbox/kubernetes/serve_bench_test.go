package kubernetes_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/wire"
)

// BenchmarkClusterServeLadder: the warm ladder through `runner serve` with
// the scripted agent, on the test cluster and, side by side in the same
// iterations (so under the same load), on the Daytona fake (loopback, no
// added latency; a real `runner sandboxd` in each fake sandbox) and on the
// local provider unconfined (the harness as a host process: the floor a
// provider's figures add to). Durable workspaces are off in every serve,
// so the figures are the providers'.
//
//   - cold: a new session each time (a pod, a Daytona sandbox, a host
//     process made; the agent started): the request to the first message
//     delta, and to the result; the session is killed outside the figures.
//   - warm: the same session (its sandbox and agent reused): the turn, and
//     what it adds over the unconfined one at the same percentile.
//   - resume: the same session, parked by a 1 s idle TTL before each turn
//     (Kubernetes: the pod deleted, the claim kept; Daytona: stopped), then
//     the turn that resumes it (a new pod on the claim / the sandbox
//     started; the agent's transcript loaded natively).
func BenchmarkClusterServeLadder(b *testing.B) {
	fake := daytonatest.New(b, daytonatest.Options{})
	kubePark := []string{"AGENTA_RUNNER_KUBERNETES_STORAGE_CLASS=runner-local", "AGENTA_RUNNER_KUBERNETES_VOLUME_SIZE=1Gi",
		"AGENTA_RUNNER_KUBERNETES_SESSION_IDLE_TTL_MS=1000"}
	ladder := []rung{
		{name: "kube", parked: "sandbox parked", warm: startServe(b, benchOff), park: startServe(b, append(kubePark, benchOff)...)},
		{name: "daytona", parked: "sandbox paused", warm: startDaytonaServe(b, fake),
			park: startDaytonaServe(b, fake, "AGENTA_RUNNER_DAYTONA_SESSION_IDLE_TTL_MS=1000")},
		{name: "local", warm: startLocalServe(b)},
	}
	b.Run("cold", func(b *testing.B) {
		f := figures{}
		for b.Loop() {
			for _, r := range ladder {
				id := session("bench-cold")
				first, whole, _ := r.warm.timedTurn(b, id, "say benchmark")
				f.add(r.name+"-first-token", first)
				f.add(r.name+"-turn", whole)
				b.StopTimer()
				r.warm.kill(b, id)
				b.StartTimer()
			}
		}
		f.report(b)
	})
	b.Run("warm", func(b *testing.B) {
		f := figures{}
		ids := map[string]string{}
		for _, r := range ladder {
			ids[r.name] = session("bench-warm")
			r.warm.timedTurn(b, ids[r.name], "say benchmark") // its sandbox made outside the figures
		}
		for b.Loop() {
			for _, r := range ladder {
				_, whole, mode := r.warm.timedTurn(b, ids[r.name], "say benchmark")
				if mode != "warm" {
					b.Fatalf("%s: a warm turn ran %s", r.name, mode)
				}
				f.add(r.name+"-turn", whole)
			}
		}
		f.report(b)
		for _, r := range ladder[:2] {
			for _, q := range []float64{0.5, 0.99} {
				b.ReportMetric(f.ms(r.name+"-turn", q)-f.ms("local-turn", q), fmt.Sprintf("%s-added-p%d-ms", r.name, int(q*100)))
			}
		}
	})
	b.Run("resume", func(b *testing.B) {
		f := figures{}
		ids := map[string]string{}
		for _, r := range ladder[:2] {
			ids[r.name] = session("bench-park")
			r.park.timedTurn(b, ids[r.name], "say benchmark")
		}
		for i := 1; b.Loop(); i++ {
			for _, r := range ladder[:2] {
				b.StopTimer()
				r.waitParked(b, ids[r.name], i)
				b.StartTimer()
				first, whole, mode := r.park.timedTurn(b, ids[r.name], "say benchmark")
				if mode != "load" {
					b.Fatalf("%s: a resumed turn ran %s", r.name, mode)
				}
				f.add(r.name+"-first-token", first)
				f.add(r.name+"-turn", whole)
			}
		}
		f.report(b)
	})
}

// benchOff turns the durable workspace store off.
const benchOff = "AGENTA_RUNNER_STORE_URL=off"

// rung is one provider of the ladder benchmark.
type rung struct {
	name   string
	warm   *serve // default idle TTL: cold and warm turns
	park   *serve // idle TTL 1 s, parking: resumed turns (nil: none)
	parked string // the provider's log message when it parks a sandbox
}

// waitParked waits for the n-th park of session's sandbox in the serve's
// log (the idle TTL's), outside the figures.
func (r rung) waitParked(b *testing.B, session string, n int) {
	ctx, cancel := context.WithTimeout(b.Context(), 3*time.Minute)
	defer cancel()
	if !r.park.log.WaitForN(ctx, n, r.parked, "session="+session) {
		b.Fatalf("%s: session %s's sandbox was not parked a %d. time:\n%s", r.name, session, n, r.park.log)
	}
}

// startDaytonaServe is a `runner serve` on the Daytona fake, driving the
// scripted agent built for the host (the fake's sandboxes are host
// directories).
func startDaytonaServe(b *testing.B, fake *daytonatest.Server, env ...string) *serve {
	b.Helper()
	return startServeProcess(b, "bench-"+randomID(), append([]string{
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=daytona",
		"AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER=daytona",
		"DAYTONA_API_KEY=" + fake.APIKey(), "DAYTONA_API_URL=" + fake.APIURL(),
		"AGENTA_RUNNER_DAYTONA_SESSION_MAX_WARM=4",
		"AGENTA_RUNNER_HARNESS_FAKE=" + hostAgent(b),
		benchOff,
	}, env...)...)
}

// startLocalServe is a `runner serve` whose sandboxes are unconfined host
// processes.
func startLocalServe(b *testing.B) *serve {
	b.Helper()
	return startServeProcess(b, "bench-"+randomID(),
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=local",
		"AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER=local",
		"AGENTA_RUNNER_LOCAL_ISOLATION=none",
		"AGENTA_RUNNER_HARNESS_FAKE="+hostAgent(b),
		benchOff,
	)
}

// hostAgent is the scripted agent built for the host.
func hostAgent(b *testing.B) string {
	return built(b, "github.com/agentrunner/runner/internal/agent/agenttest/fakeagent")
}

// timedTurn runs one turn of session (msgs as fakeTurn's) and returns the
// time to its first message delta, to its result, and its mode.
func (s *serve) timedTurn(b *testing.B, session string, msgs ...string) (first, whole time.Duration, mode string) {
	b.Helper()
	start := time.Now()
	tr := s.stream(b, fakeTurn(session, msgs...), func(ev wire.Event) {
		if first == 0 && ev.Type == "message_delta" {
			first = time.Since(start)
		}
	})
	whole = time.Since(start)
	if !tr.Result.OK {
		b.Fatalf("turn of %s: status %d, %s\nrunner log:\n%s", session, tr.Status, tr.Result.Error, s.log)
	}
	return first, whole, tr.Mode
}

// kill ends session's warm sandbox (/kill deletes it).
func (s *serve) kill(b *testing.B, session string) {
	b.Helper()
	if code, body := s.client.Call(b, "POST", "/kill", map[string]any{"sessionId": session, "projectId": "kube-e2e"}); code != 200 {
		b.Fatalf("kill %s: %d %s", session, code, body)
	}
}

// figures are durations by name, reported as p50 and p99 in ms.
type figures map[string][]time.Duration

func (f figures) add(name string, d time.Duration) { f[name] = append(f[name], d) }

// ms is name's q-quantile in milliseconds.
func (f figures) ms(name string, q float64) float64 {
	d := slices.Sorted(slices.Values(f[name]))
	if len(d) == 0 {
		return 0
	}
	return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
}

func (f figures) report(b *testing.B) {
	for name := range f {
		b.ReportMetric(f.ms(name, 0.5), name+"-p50-ms")
		b.ReportMetric(f.ms(name, 0.99), name+"-p99-ms")
	}
}
