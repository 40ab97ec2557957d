package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

// scrape GETs /metrics, with the token when token is set.
func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sample is the value of one series in an exposition, or -1.
func sample(exposition, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(exposition)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestMetricsAfterTurns: /metrics needs the token on the main port and
// counts the turns served: cold then warm, a tool call and an approval
// decision, the first-event latency, the warm pool.
func TestMetricsAfterTurns(t *testing.T) {
	ln, base := runnertest.Listen(t)
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken)
	stop := serveInTest(t, ln, env)
	defer stop()
	runnertest.WaitHealthy(t, base, nil, nil)

	if code, _ := scrape(t, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d, want 401", code)
	}
	for i, msg := range []string{`say hello\ntool Read {\"path\":\"a\"} => ok`, `say again`} {
		body := `{"harness":"fake","sessionId":"m","projectId":"p","messages":[{"role":"user","content":"` + msg + `"}]}`
		resp := post(t, base+"/run", body)
		var res wire.Result
		_ = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if !res.OK {
			t.Fatalf("turn %d: %+v", i, res)
		}
	}
	code, text := scrape(t, base+"/metrics", testToken)
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, text)
	}
	want := map[string]float64{
		`agenta_runner_turn_duration_seconds_count{harness="fake",outcome="completed",provider="local",start="cold"}`: 1,
		`agenta_runner_turn_duration_seconds_count{harness="fake",outcome="completed",provider="local",start="warm"}`: 1,
		`agenta_runner_turn_first_event_seconds_count{harness="fake",provider="local",start="cold"}`:                  1,
		`agenta_runner_turn_first_event_seconds_count{harness="fake",provider="local",start="warm"}`:                  1,
		`agenta_runner_tool_calls_total{harness="fake",provider="local"}`:                                             1,
		`agenta_runner_pool_warm_sessions{provider="local"}`:                                                          1,
		`agenta_runner_pool_capacity{provider="local"}`:                                                               8,
		`agenta_runner_turns_in_flight`:                                                                               0,
		`agenta_runner_sandboxes{provider="local",state="running"}`:                                                   1,
	}
	for series, v := range want {
		if got := sample(text, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", text)
	}
}

// TestMetricsOnTheirOwnAddress: AGENTA_RUNNER_METRICS_ADDR serves
// /metrics there without the token, and not on the main port.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	ln, base := runnertest.Listen(t)
	mln, mbase := runnertest.Listen(t)
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken, "AGENTA_RUNNER_METRICS_ADDR="+mln.Addr().String())
	stop := serveInTest(t, ln, env, mln)
	defer stop()
	runnertest.WaitHealthy(t, base, nil, nil)
	if code, text := scrape(t, mbase+"/metrics", ""); code != 200 || !strings.Contains(text, "agenta_runner_turns_in_flight 0") {
		t.Fatalf("metrics address: %d %.300s", code, text)
	}
	if code, _ := scrape(t, base+"/metrics", testToken); code != http.StatusNotFound {
		t.Fatalf("/metrics on the main port while a metrics address is set: %d, want 404", code)
	}
}

// TestGracefulDrain: on SIGTERM the replica turns not ready, refuses new
// turns with 503 naming the reason, lets the turn in flight finish (not
// cancelled) and then exits.
func TestGracefulDrain(t *testing.T) {
	ln, base := runnertest.Listen(t)
	env := testEnv(t, "AGENTA_RUNNER_TOKEN="+testToken, "AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS=20000")
	stop := serveInTest(t, ln, env)
	defer stop()
	runnertest.WaitHealthy(t, base, nil, nil)
	if resp, err := http.Get(base + "/ready"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/ready before shutdown: %v %v", resp, err)
	}

	// A turn that waits for a file the test writes once it has seen the drain.
	gate := t.TempDir() + "/go"
	script := `say started\nexec while [ ! -e ` + gate + ` ]; do sleep 0.05; done; echo released\nsay finished`
	resp := post(t, base+"/stream", `{"harness":"fake","sessionId":"d","projectId":"p","messages":[{"role":"user","content":"`+script+`"}]}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), "started") {
	}

	exited := make(chan int, 1)
	go func() { exited <- stop() }() // SIGTERM
	waitStatus(t, base+"/ready", http.StatusServiceUnavailable)
	if resp, err := http.Get(base + "/health?ready=1"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/health?ready=1 while draining: %v %v", resp, err)
	}
	if resp, err := http.Get(base + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health (liveness) while draining: %v %v", resp, err)
	}
	refused := post(t, base+"/run", `{"harness":"fake","messages":[{"role":"user","content":"say hi"}]}`)
	b, _ := io.ReadAll(refused.Body)
	refused.Body.Close()
	if refused.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "another replica") {
		t.Fatalf("new turn while draining: %d %s", refused.StatusCode, b)
	}

	if err := writeFile(gate); err != nil {
		t.Fatal(err)
	}
	var last wire.Record
	for sc.Scan() {
		_ = json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Kind != "result" || !last.Result.OK || !strings.Contains(last.Result.Output, "finished") {
		t.Fatalf("the in-flight turn did not finish: %+v", last.Result)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("serve exited %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after the drain")
	}
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered %d (last: %v %v)", url, want, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveInTest runs `runner serve` in the test process; the returned stop
// is SIGTERM (the context signal.NotifyContext cancels) and returns the
// exit code. It is safe to call more than once.
func serveInTest(t *testing.T, ln net.Listener, env []string, metrics ...net.Listener) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	for _, m := range metrics {
		ctx = withMetricsListener(ctx, m)
	}
	var stderr runnertest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(withListener(ctx, ln), []string{"serve"}, env, nil, io.Discard, &stderr) }()
	var once sync.Once
	code := 0
	stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(60 * time.Second):
				t.Errorf("serve did not exit; stderr:\n%s", stderr.String())
				code = -1
			}
			if code != 0 {
				t.Logf("serve stderr:\n%s", stderr.String())
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return stop
}

func writeFile(path string) error { return os.WriteFile(path, nil, 0o600) }
