package tenanttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/wire"
)

// floodTurn is what a flooded streamed turn returned, read without
// keeping its deltas: the suite's own memory is not the point.
type floodTurn struct {
	Status int
	Bytes  int64 // the body's size
	Deltas int64 // bytes of message deltas streamed
	Events int
	Result wire.Result
	First  chan struct{} // closed at the first message delta
}

// streamFlood streams req and counts what comes back. first, when not
// nil, is closed at the first message delta.
func (r *runner) streamFlood(t testing.TB, req any, first chan struct{}) floodTurn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	resp := r.do(t, ctx, "POST", "/stream", req, "application/x-ndjson")
	defer resp.Body.Close()
	ft := floodTurn{Status: resp.StatusCode}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	for sc.Scan() {
		ft.Bytes += int64(len(sc.Bytes()) + 1)
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("bad NDJSON line %.200q: %v", sc.Bytes(), err)
			return ft
		}
		switch {
		case rec.Event != nil:
			ft.Events++
			if rec.Event.Type == wire.EventMessageDelta {
				ft.Deltas += int64(len(rec.Event.Delta))
				if first != nil {
					close(first)
					first = nil
				}
			}
		case rec.Result != nil:
			ft.Result = *rec.Result
		}
	}
	if err := sc.Err(); err != nil {
		t.Errorf("read /stream: %v", err)
	}
	if first != nil {
		close(first)
	}
	return ft
}

// memory reads the serve process's resident set and its high-water mark,
// in bytes.
func (r *runner) memory(t testing.TB) (rss, hwm int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read the runner's memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("parse %s %q: %v", k, v, err)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	return rss, hwm
}

// floodPrompt floods about total bytes of assistant text in deltas of
// size bytes.
func floodPrompt(total, size int) string {
	return fmt.Sprintf("flood %d %d", total/size, size)
}

// BenchmarkOutputFlood measures how much a 100 MB flood of assistant text
// through `runner serve` grows the runner's resident set (its high-water
// mark over the resident set after a warm-up turn): the goal is under
// 64 MB whatever the harness sends.
func BenchmarkOutputFlood(b *testing.B) {
	if raceBuild {
		b.Skip("the race detector's shadow memory would dominate the figure")
	}
	needBwrap(b)
	r := start(b)
	warm := r.streamFlood(b, fake("say warm", map[string]any{"sessionId": "bench-warm"}), nil)
	if !warm.Result.OK {
		b.Fatalf("warm-up turn failed: %+v\n%s", warm.Result, r.Log())
	}
	base, _ := r.memory(b)
	b.ResetTimer()
	var worst int64
	for i := 0; i < b.N; i++ {
		ft := r.streamFlood(b, fake(floodPrompt(100<<20, 4<<10), map[string]any{"sessionId": "bench-" + strconv.Itoa(i)}), nil)
		if ft.Status != 200 {
			b.Fatalf("flood turn: status %d %+v", ft.Status, ft.Result)
		}
		_, hwm := r.memory(b)
		worst = max(worst, hwm-base)
	}
	b.ReportMetric(float64(worst)/(1<<20), "rss-growth-MB")
}

// TestAttackOutputFlood: a harness floods 100 MB of assistant text (24 MB under
// the race detector) into a session's turn (issue 21.5: 20× that in runner memory OOM-killed the
// runner and every tenant's turn). What must hold: the turn ends with an
// error naming the cap it broke (the session log's,
// AGENTA_RUNNER_MAX_TURN_LOG_BYTES) and its kept output is truncated
// with a marker; the runner stays up, another session's turn run during
// the flood completes, and the runner's resident set grows far less than
// the flood (asserted with a wide margin, outside the race detector).
func TestAttackOutputFlood(t *testing.T) {
	needBwrap(t)
	// Under the race detector, whose shadow memory voids the RSS figure
	// anyway, the flood is 3× a log cap lowered to 8 MiB (twice the
	// output cap still): the same refusals at a quarter of the bytes.
	// 100 MB took 4 min there on a loaded machine.
	total, env := 100<<20, []string(nil)
	if raceBuild {
		total, env = 24<<20, []string{"AGENTA_RUNNER_MAX_TURN_LOG_BYTES=8388608"}
	}
	r := start(t, env...)
	if warm := r.streamFlood(t, fake("say warm", map[string]any{"sessionId": "warm"}), nil); !warm.Result.OK {
		t.Fatalf("warm-up turn: %+v", warm.Result)
	}
	base, _ := r.memory(t)
	first := make(chan struct{})
	flooded := make(chan floodTurn, 1)
	go func() {
		flooded <- r.streamFlood(t, fake(floodPrompt(total, 4<<10), map[string]any{"sessionId": "flood"}), first)
	}()
	<-first
	victim := r.stream(t, fake("say hello victim", map[string]any{"sessionId": "victim"}))
	ft := <-flooded
	if !victim.Result.OK || !strings.Contains(victim.Text(), "hello victim") {
		t.Errorf("the other session's turn: %+v", victim.Result)
	}
	if ft.Result.OK || !strings.Contains(ft.Result.Error, "AGENTA_RUNNER_MAX_TURN_LOG_BYTES") {
		t.Errorf("flood turn: ok=%v error %q, want the turn log cap's error", ft.Result.OK, ft.Result.Error)
	}
	if !strings.Contains(ft.Result.Output, "AGENTA_RUNNER_MAX_OUTPUT_BYTES") || len(ft.Result.Output) > 5<<20 {
		t.Errorf("flood output: %d bytes, no truncation marker", len(ft.Result.Output))
	}
	if status, _ := r.call(t, "GET", "/health", nil); status != 200 {
		t.Errorf("/health after the flood: %d", status)
	}
	_, hwm := r.memory(t)
	t.Logf("a %d MB flood streamed %d MB of deltas; runner RSS grew %d MB", total>>20, ft.Deltas>>20, (hwm-base)>>20)
	if !raceBuild && hwm-base > 512<<20 {
		t.Errorf("runner RSS grew %d MB for a 100 MB flood", (hwm-base)>>20)
	}
}

// TestAttackOversizeEvent: a tool prints 20 MB, which the harness sends
// as one session/update line. What must hold: the runner reads no line
// past AGENTA_RUNNER_MAX_EVENT_BYTES (8 MiB by default) and the turn ends
// with an error naming it; none of the line reaches the stream, and the
// runner serves the session's next turn.
func TestAttackOversizeEvent(t *testing.T) {
	needBwrap(t)
	r := start(t)
	tr := r.streamFlood(t, fake("exec head -c 20000000 /dev/zero | tr '\\0' x", map[string]any{"sessionId": "big"}), nil)
	if tr.Result.OK || !strings.Contains(tr.Result.Error, "AGENTA_RUNNER_MAX_EVENT_BYTES") {
		t.Errorf("oversize line: ok=%v error %q", tr.Result.OK, tr.Result.Error)
	}
	if tr.Deltas > 1<<20 {
		t.Errorf("%d bytes of the oversize line were streamed", tr.Deltas)
	}
	if next := r.stream(t, fake("say still here", map[string]any{"sessionId": "big"})); !next.Result.OK || !strings.Contains(next.Text(), "still here") {
		t.Errorf("next turn: %+v", next.Result)
	}
}

// TestAttackResultFlood: a harness floods a JSON (not streamed) turn,
// whose result must hold every event. What must hold: the turn fails
// with an error naming AGENTA_RUNNER_MAX_RESULT_BYTES and a 429, and the
// result is bounded by the cap, not by the flood.
func TestAttackResultFlood(t *testing.T) {
	needBwrap(t)
	// Under the race detector the cap is lowered to 4 MiB (the output
	// cap, which the result's output and messages each hold, to 1 MiB)
	// and the flood to 16 MB, still 4× the cap: a race-built runner took
	// 100 s to gather the default 16 MiB at load ~25 and its answer
	// missed the client's 2 min (6.8 s without the race detector).
	limit, env := 16<<20, []string(nil)
	if raceBuild {
		limit, env = 4<<20, []string{"AGENTA_RUNNER_MAX_RESULT_BYTES=4194304", "AGENTA_RUNNER_MAX_OUTPUT_BYTES=1048576"}
	}
	r := start(t, env...)
	status, body := r.call(t, "POST", "/run", fake(floodPrompt(4*limit, 4<<10), map[string]any{"sessionId": "json"}))
	var res wire.Result
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatalf("status %d: %v", status, err)
	}
	if status != 429 || res.OK || !strings.Contains(res.Error, "AGENTA_RUNNER_MAX_RESULT_BYTES") {
		t.Errorf("status %d ok=%v error %q", status, res.OK, res.Error)
	}
	if len(body) > 5*limit/2 {
		t.Errorf("result of %d bytes for a %d-byte cap", len(body), limit)
	}
}

// TestAttackForeignSessionUpdate: a tool the harness runs writes a
// session/update naming another session id into the harness's stdout
// (ACP multiplexes sessions on one connection). What must hold: none of
// it enters the turn (stream, result, log); the runner logs it once.
func TestAttackForeignSessionUpdate(t *testing.T) {
	needBwrap(t)
	r := start(t)
	line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"victim-session","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"INJ''ECTED"}}}}` // the shell joins the quotes: the prompt never holds the word
	cmd := "exec for i in 1 2 3; do printf '%s\\n' '" + line + "' > /proc/$PPID/fd/1; done\nsay after"
	tr := r.stream(t, fake(cmd, map[string]any{"sessionId": "own"}))
	if !tr.Result.OK || !strings.Contains(tr.Text(), "exec exit 0") || !strings.Contains(tr.Text(), "after") {
		t.Fatalf("turn: %+v %q", tr.Result, tr.Text())
	}
	if strings.Contains(string(tr.Raw), "INJECTED") {
		t.Errorf("the other session's update entered the turn:\n%.2000s", tr.Raw)
	}
	_, log := r.call(t, "GET", "/v1/sessions/own/events", nil)
	if strings.Contains(string(log), "INJECTED") {
		t.Errorf("the other session's update is in the session log")
	}
	if n := strings.Count(r.Log(), "addressed to another session"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, r.Log())
	}
}
