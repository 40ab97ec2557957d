package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/modeltest"
	"github.com/agentrunner/runner/internal/wire"
)

// BenchmarkPrewarmNewSession measures a new session's time to first
// token (request sent to the first message_delta of the stream) through
// `runner serve` with a pre-warmed slot waiting, through `runner serve`
// without pre-warming (a cold start), and, for the real harnesses, a
// direct spawn of the same harness over ACP (spawn, initialize,
// session/new, prompt; to its first agent_message_chunk) in the same
// run; the slot is refilled between
// iterations, untimed. It reports p50 and p99 of each and the resident
// memory of a ready slot's processes. The scripted fake agent always
// runs; the real harnesses as TestRealHarnessesServe (claude, pi_core).
//
//	RUNNER_TEST_HARNESS_DIR=/var/cache/runner-harnesses RUNNER_TEST_HARNESSES=claude,pi_core go test ./cmd/runner -run '^$' -bench PrewarmNewSession -benchtime 30x
func BenchmarkPrewarmNewSession(b *testing.B) {
	names := []string{"fake"}
	dir := os.Getenv("RUNNER_TEST_HARNESS_DIR")
	if dir != "" {
		_, real := realHarnesses(b)
		for _, n := range real {
			if n == "claude" || n == "pi_core" {
				names = append(names, n)
			}
		}
	}
	for _, name := range names {
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
			defer cancel()
			srv := modeltest.New(b, modeltest.WithScript(realScript))
			extra := []string{modelAllow(srv)}
			c := realCases[name]
			if name == "fake" {
				extra = append(extra, "AGENTA_RUNNER_HARNESS_FAKE="+strings.Join(agenttest.Command(), " "))
				c = realCase{model: "m", conn: func(s *modeltest.Server) map[string]any {
					return map[string]any{"provider": "openai", "deployment": "custom", "endpoint": map[string]any{"baseUrl": s.OpenAIBaseURL()},
						"environment": map[string]any{"OPENAI_BASE_URL": s.OpenAIBaseURL()}, "credentials": credential("OPENAI_API_KEY", "fake-key")}
				}}
			}
			off := startRealServe(b, ctx, dir, b.TempDir(), extra...)
			on := startRealServe(b, ctx, dir, b.TempDir(), append(extra, "AGENTA_RUNNER_PREWARM="+name+":1")...)
			req := func(session string) map[string]any {
				return map[string]any{"harness": name, "sessionId": session, "projectId": "bench", "model": c.model, "modelConnection": c.conn(srv),
					"permissions": map[string]any{"default": "allow"},
					"messages":    []any{map[string]any{"role": "user", "content": "say hello"}}}
			}
			// Untimed first turns: a first launch compiles and caches.
			firstToken(b, ctx, off, req("warmup-off"))
			waitReadySlot(b, ctx, on)
			firstToken(b, ctx, on, req("warmup-on"))
			var rss []float64
			var pre, cold, direct []time.Duration
			i := 0
			for b.Loop() {
				i++
				waitReadySlot(b, ctx, on)
				if r := slotRSS(b); r > 0 {
					rss = append(rss, r)
				}
				d, start := firstToken(b, ctx, on, req(fmt.Sprintf("on-%d", i)))
				if start != "prewarmed" {
					b.Fatalf("turn %d started %q with a ready slot", i, start)
				}
				pre = append(pre, d)
				on.kill(b, ctx, fmt.Sprintf("on-%d", i), "bench")
				d, _ = firstToken(b, ctx, off, req(fmt.Sprintf("off-%d", i)))
				cold = append(cold, d)
				off.kill(b, ctx, fmt.Sprintf("off-%d", i), "bench")
				if name != "fake" {
					t0 := time.Now()
					dr := newDirect(b, ctx, dir, name, req("direct"))
					dr.prompt(b, ctx)
					if at := dr.firstText.Load(); at != 0 {
						direct = append(direct, time.Unix(0, at).Sub(t0))
					} else {
						b.Fatalf("direct %s: no text streamed", name)
					}
					dr.close()
				}
			}
			pct := func(ds []time.Duration, p float64) float64 {
				s := slices.Clone(ds)
				slices.Sort(s)
				return float64(s[min(len(s)-1, int(float64(len(s))*p))]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(pre, 0.5), "prewarmed-p50-ms")
			b.ReportMetric(pct(pre, 0.99), "prewarmed-p99-ms")
			b.ReportMetric(pct(cold, 0.5), "cold-p50-ms")
			b.ReportMetric(pct(cold, 0.99), "cold-p99-ms")
			if len(direct) > 0 {
				b.ReportMetric(pct(direct, 0.5), "direct-p50-ms")
				b.ReportMetric(pct(direct, 0.99), "direct-p99-ms")
			}
			if len(rss) > 0 {
				slices.Sort(rss)
				b.ReportMetric(rss[len(rss)/2], "slot-rss-MB")
			}
		})
	}
}

// firstToken streams req and returns the time to its first message_delta
// and the agent-session event's start.
func firstToken(b *testing.B, ctx context.Context, rs *runningServe, body map[string]any) (time.Duration, string) {
	b.Helper()
	raw, _ := json.Marshal(body)
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, rs.base+"/stream", strings.NewReader(string(raw)))
	hreq.Header.Set("Authorization", "Bearer "+testToken)
	hreq.Header.Set("Accept", "application/x-ndjson")
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var first time.Duration
	start := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var r wire.Record
		_ = json.Unmarshal(sc.Bytes(), &r)
		switch {
		case r.Event != nil && r.Event.Type == wire.EventMessageDelta && first == 0:
			first = time.Since(t0)
		case r.Event != nil && r.Event.Name == "agent-session":
			var m map[string]string
			_ = json.Unmarshal(r.Event.Data, &m)
			start = m["start"]
		case r.Result != nil:
			if !r.Result.OK || first == 0 {
				b.Fatalf("turn: ok %v error %q output %q", r.Result.OK, r.Result.Error, r.Result.Output)
			}
			return first, start
		}
	}
	b.Fatalf("stream ended without a result")
	return 0, ""
}

// waitReadySlot waits for the runner's slot to be ready (untimed).
func waitReadySlot(b *testing.B, ctx context.Context, rs *runningServe) {
	b.Helper()
	for {
		hreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, rs.base+"/health", nil)
		var h struct {
			Prewarm []prewarmHealthEntry `json:"prewarm"`
		}
		if resp, err := http.DefaultClient.Do(hreq); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		if len(h.Prewarm) == 1 && h.Prewarm[0].Ready == 1 && h.Prewarm[0].Refilling == 0 {
			return
		}
		if len(h.Prewarm) == 1 && h.Prewarm[0].LastError != "" {
			b.Fatalf("slot failed: %s", h.Prewarm[0].LastError)
		}
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling, untimed
		}
	}
}

// slotRSS is the resident memory, in MB, of the processes holding a
// gateway placeholder key that no turn has claimed: the ready slot's
// harness and its children (they inherit its environment; Claude's CLI
// has it in ANTHROPIC_CUSTOM_HEADERS under gateway authentication). With one
// ready slot and every claimed session killed, that is the slot.
func slotRSS(b *testing.B) float64 {
	b.Helper()
	total := 0.0
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !strings.Contains(string(env), "runner-key-") {
			continue
		}
		status, err := os.ReadFile(d + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				total += kb / 1024
			}
		}
	}
	return total
}
