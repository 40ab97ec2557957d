package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/jsonrpc"
	"github.com/agentrunner/runner/internal/modeltest"
	"github.com/agentrunner/runner/internal/wire"
)

// BenchmarkRealHarness measures, per real harness against the fake model
// (gated like TestRealHarnessesServe): a cold turn through `runner serve`
// (new session: sandbox, config files, harness start, initialize,
// session/new, prompt, events), a warm turn (the same session's harness
// again), and the same two driven directly over ACP with the same
// configuration in the same run. runner-added-* is runner p50 minus
// direct p50. Each iteration runs all four.
//
//	RUNNER_TEST_HARNESS_DIR=/var/cache/runner-harnesses go test ./cmd/runner -run '^$' -bench RealHarness -benchtime 5x
func BenchmarkRealHarness(b *testing.B) {
	dir, names := realHarnesses(b)
	for _, name := range names {
		b.Run(name, func(b *testing.B) {
			c, ok := realCases[name]
			if !ok {
				b.Fatalf("no case for harness %q", name)
			}
			ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
			defer cancel()
			srv := modeltest.New(b, modeltest.WithScript(realScript))
			rs := startRealServe(b, ctx, dir, b.TempDir(), modelAllow(srv))
			req := func(session string) map[string]any {
				r := map[string]any{"harness": name, "sessionId": session, "projectId": "bench", "model": c.model, "modelConnection": c.conn(srv),
					"messages": []any{map[string]any{"role": "user", "content": "say hello"}}}
				if c.harnessMod != "" {
					r["harnessMode"] = c.harnessMod
				}
				return r
			}
			// One untimed turn each way: the first launch after an
			// install compiles and caches (node, the claude binary).
			rs.stream(b, ctx, req("bench-warmup")).wantOK(b, "PONG say hello")
			d := newDirect(b, ctx, dir, name, req("direct"))
			d.prompt(b, ctx)
			d.close()

			var cold, warm, dcold, dwarm []time.Duration
			viaRunner := func(session string) {
				start := time.Now()
				rs.stream(b, ctx, req(session)).wantOK(b, "PONG say hello")
				cold = append(cold, time.Since(start))
				start = time.Now()
				tr := rs.stream(b, ctx, req(session))
				warm = append(warm, time.Since(start))
				tr.wantOK(b, "PONG say hello")
				if m := sessionMode(tr); m != "warm" {
					b.Fatalf("second turn ran %q, not warm", m)
				}
				// The warm harness goes, so it does not compete with the
				// direct one (Claude makes a suggestion call after a turn).
				rs.kill(b, ctx, session, "bench")
			}
			viaACP := func() {
				start := time.Now()
				d := newDirect(b, ctx, dir, name, req("direct"))
				d.prompt(b, ctx)
				dcold = append(dcold, time.Since(start))
				start = time.Now()
				d.prompt(b, ctx)
				dwarm = append(dwarm, time.Since(start))
				d.close()
			}
			i := 0
			for b.Loop() {
				i++
				// Alternate which goes first, so neither always follows
				// the other's leftovers.
				if i%2 == 0 {
					viaACP()
				}
				viaRunner(fmt.Sprintf("bench-%d", i))
				if i%2 == 1 {
					viaACP()
				}
			}
			ms := func(ds []time.Duration) float64 {
				s := slices.Clone(ds)
				slices.Sort(s)
				return float64(s[len(s)/2]) / float64(time.Millisecond)
			}
			b.ReportMetric(ms(cold), "cold-p50-ms")
			b.ReportMetric(ms(warm), "warm-p50-ms")
			b.ReportMetric(ms(dcold), "direct-cold-p50-ms")
			b.ReportMetric(ms(dwarm), "direct-warm-p50-ms")
			b.ReportMetric(ms(cold)-ms(dcold), "runner-added-cold-ms")
			b.ReportMetric(ms(warm)-ms(dwarm), "runner-added-warm-ms")
		})
	}
}

// kill is POST /kill: the session's warm harness is released.
func (rs *runningServe) kill(tb testing.TB, ctx context.Context, session, project string) {
	tb.Helper()
	body := fmt.Sprintf(`{"sessionId":%q,"projectId":%q}`, session, project)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rs.base+"/kill", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("POST /kill: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("POST /kill: status %d", resp.StatusCode)
	}
}

func sessionMode(tr turnRecords) string {
	for _, r := range tr.events {
		if r.Event.Type == wire.EventData && r.Event.Name == "agent-session" {
			var m map[string]string
			b, _ := json.Marshal(r.Event.Data)
			_ = json.Unmarshal(b, &m)
			return m["mode"]
		}
	}
	return ""
}

// direct is a harness driven over ACP with no runner: the configuration
// the runner would generate, written into a fresh home, and a session.
type direct struct {
	cmd     *exec.Cmd
	conn    *jsonrpc.Conn
	stdin   interface{ Close() error }
	session string
	// firstText is when the first agent_message_chunk came (UnixNano).
	firstText atomic.Int64
}

func newDirect(b *testing.B, ctx context.Context, dir, name string, body map[string]any) *direct {
	b.Helper()
	raw, _ := json.Marshal(body)
	req, err := wire.Decode(raw)
	if err != nil {
		b.Fatal(err)
	}
	env := map[string]string{}
	for _, c := range req.ModelConnection.Credentials {
		env[c.Binding.Name] = c.Value
	}
	mc, err := harness.ModelConnFor(name, req, env, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	argv, launchEnv, err := harness.Resolve(dir, name)
	if err != nil {
		b.Fatal(err)
	}
	home, cwd := b.TempDir(), b.TempDir()
	hc, err := harness.Configure(name, mc, harness.Dirs{Home: home, Root: os.Geteuid() == 0})
	if err != nil {
		b.Fatal(err)
	}
	if err := hc.Write(home); err != nil {
		b.Fatal(err)
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	for k, v := range launchEnv {
		base = append(base, k+"="+v)
	}
	if req.HarnessMode != "" {
		base = append(base, "INITIAL_AGENT_MODE="+req.HarnessMode)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = hc.Environ(base), cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	d := &direct{cmd: cmd, stdin: in}
	d.conn = jsonrpc.New(out, in, jsonrpc.HandlerFunc(func(_ context.Context, method string, params json.RawMessage, _ bool) (any, error) {
		if method == "session/update" && bytes.Contains(params, []byte(`"agent_message_chunk"`)) {
			d.firstText.CompareAndSwap(0, time.Now().UnixNano())
		}
		return nil, nil
	}))
	if err := d.conn.Call(ctx, "initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}}, nil); err != nil {
		d.close()
		b.Fatalf("initialize: %v", err)
	}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := d.conn.Call(ctx, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}, &sess); err != nil {
		d.close()
		b.Fatalf("session/new: %v", err)
	}
	d.session = sess.SessionID
	if name == "claude" {
		// As the runner does for the default policy.
		if err := d.conn.Call(ctx, "session/set_mode", map[string]any{"sessionId": d.session, "modeId": harness.ClaudeMode(nil)}, nil); err != nil {
			d.close()
			b.Fatalf("session/set_mode: %v", err)
		}
	}
	return d
}

func (d *direct) prompt(b *testing.B, ctx context.Context) {
	b.Helper()
	if err := d.conn.Call(ctx, "session/prompt", map[string]any{"sessionId": d.session, "prompt": []any{map[string]any{"type": "text", "text": "say hello"}}}, nil); err != nil {
		b.Fatalf("session/prompt: %v", err)
	}
}

// close ends the harness and everything it started (codex's app-server).
func (d *direct) close() {
	_ = d.stdin.Close()
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-done
	d.conn.Close()
}
