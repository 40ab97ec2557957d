package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/jsonrpc"
	"github.com/agentrunner/runner/internal/wire"
)

// reportPercentiles adds p50 and p99 of ds, in milliseconds, to b.
// postRun sends one one-shot turn and returns its body; a transport
// error or a status other than 200 ends the benchmark.
func postRun(b *testing.B, base, body string) []byte {
	b.Helper()
	req, _ := http.NewRequest("POST", base+"/run", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	return raw
}

func reportPercentiles(b *testing.B, ds []time.Duration, prefix string) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(ds[len(ds)/2]), prefix+"p50-ms")
	b.ReportMetric(ms(ds[(len(ds)*99)/100]), prefix+"p99-ms")
}

// directTurn is the baseline: the same fake agent driven over ACP with no
// runner in between (spawn, initialize, session/new, prompt, exit).
func directTurn(b *testing.B, dir string) {
	argv := agenttest.Command()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	conn := jsonrpc.New(out, in, jsonrpc.HandlerFunc(func(context.Context, string, json.RawMessage, bool) (any, error) { return nil, nil }))
	ctx := context.Background()
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := conn.Call(ctx, "initialize", map[string]any{"protocolVersion": 1}, nil); err != nil {
		b.Fatal(err)
	}
	if err := conn.Call(ctx, "session/new", map[string]any{"cwd": dir, "mcpServers": []any{}}, &sess); err != nil {
		b.Fatal(err)
	}
	if err := conn.Call(ctx, "session/prompt", map[string]any{"sessionId": sess.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "hello"}}}, nil); err != nil {
		b.Fatal(err)
	}
	_ = in.Close()
	_ = cmd.Wait()
	conn.Close()
}

// BenchmarkColdTurn compares a whole cold turn through the HTTP API
// (sandbox, harness start, ACP, events, teardown) with the direct ACP
// baseline measured in the same run. runner-added = runner - direct.
func BenchmarkColdTurn(b *testing.B) {
	b.Run("direct-acp", func(b *testing.B) {
		dir := b.TempDir()
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			directTurn(b, dir)
			ds = append(ds, time.Since(start))
		}
		reportPercentiles(b, ds, "")
	})
	for _, iso := range []string{"none", "bwrap"} {
		b.Run("runner-http-"+iso, func(b *testing.B) {
			if iso == "bwrap" {
				if _, err := exec.LookPath("bwrap"); err != nil {
					b.Skip("bwrap not installed")
				}
			}
			e := newEnvIsolated(b, iso)
			var ds []time.Duration
			for b.Loop() {
				body := runBody("fake", "hello") // a new session: cold every time
				start := time.Now()
				postRun(b, e.srv.URL, body)
				ds = append(ds, time.Since(start))
			}
			reportPercentiles(b, ds, "")
		})
	}
}

// BenchmarkStreamEvents measures NDJSON throughput: one turn streaming
// many message deltas to an HTTP client.
func BenchmarkStreamEvents(b *testing.B) {
	e := newEnv(b)

	const n = 50000
	body := runBody("fake", "flood 50000")
	var total time.Duration
	events := 0
	for b.Loop() {
		start := time.Now()
		req, _ := http.NewRequest("POST", e.srv.URL+"/stream", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var r wire.Record
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Kind == "event" {
				events++
			}
		}
		resp.Body.Close()
		total += time.Since(start)
	}
	if events < n {
		b.Fatalf("only %d events", events)
	}
	b.ReportMetric(float64(events)/total.Seconds(), "events/s")
}

// BenchmarkWarmTurn compares a warm turn through the HTTP API (session
// continued on its live harness: fingerprints, ledger, event log, NDJSON)
// with a direct session/prompt on an already open ACP session, measured
// in the same run. runner-added = runner - direct.
func BenchmarkWarmTurn(b *testing.B) {
	b.Run("direct-acp", func(b *testing.B) {
		dir := b.TempDir()
		argv := agenttest.Command()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		conn := jsonrpc.New(out, in, jsonrpc.HandlerFunc(func(context.Context, string, json.RawMessage, bool) (any, error) { return nil, nil }))
		// The agent exits on stdin EOF, which ends the reader Close waits for.
		defer func() { _ = in.Close(); _ = cmd.Wait(); conn.Close() }()
		ctx := context.Background()
		var sess struct {
			SessionID string `json:"sessionId"`
		}
		_ = conn.Call(ctx, "initialize", map[string]any{"protocolVersion": 1}, nil)
		if err := conn.Call(ctx, "session/new", map[string]any{"cwd": dir, "mcpServers": []any{}}, &sess); err != nil {
			b.Fatal(err)
		}
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := conn.Call(ctx, "session/prompt", map[string]any{"sessionId": sess.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "hello"}}}, nil); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportPercentiles(b, ds, "")
	})
	b.Run("runner-http", func(b *testing.B) {
		e := newEnv(b)

		body := sessionBody("bench-warm", "fake", "hello")
		var ds []time.Duration
		warm := 0
		for b.Loop() {
			start := time.Now()
			raw := postRun(b, e.srv.URL, body)
			ds = append(ds, time.Since(start))
			if strings.Contains(string(raw), `"mode":"warm"`) {
				warm++
			}
		}
		if warm < len(ds)-1 {
			b.Fatalf("only %d of %d turns were warm", warm, len(ds))
		}
		reportPercentiles(b, ds[1:], "")
	})
}
