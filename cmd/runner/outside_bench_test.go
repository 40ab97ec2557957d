package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/jsonrpc"
	"github.com/agentrunner/runner/internal/runnertest"
)

// The outside view: what a platform sees. `runner serve` runs as its own
// process with default settings (bubblewrap, SQLite in its data dir), the
// harness is a Python ACP agent, and the client opens a new HTTP/1.1
// connection per request and sends the whole conversation every turn.

// benchServe is a `runner serve` process started from the built binary.
type benchServe struct {
	base string
	cmd  *exec.Cmd
	log  string // its stderr, in a file
}

// benchIsolation is bwrap (the default) when bubblewrap is there or
// RUNNER_TEST_BWRAP=1 requires it; without it the benchmark runs
// unconfined and says so.
func benchIsolation(b *testing.B) string {
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("RUNNER_TEST_BWRAP") == "1" {
			b.Fatal("bwrap is required (RUNNER_TEST_BWRAP=1): apt-get install bubblewrap")
		}
		b.Logf("NOTE: bubblewrap not installed: the runner runs harnesses unconfined (AGENTA_RUNNER_LOCAL_ISOLATION=none)")
		return "none"
	}
	return "bwrap"
}

// startBenchServe starts bin serve with the defaults plus env and waits
// until /health answers.
func startBenchServe(b *testing.B, bin string, env ...string) *benchServe {
	b.Helper()
	sock, base := runnertest.Socket(b)
	dir := b.TempDir()
	s := &benchServe{base: base, log: filepath.Join(dir, "serve.log")}
	logf, err := os.Create(s.log)
	if err != nil {
		b.Fatal(err)
	}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append([]string{
		"PATH=/usr/bin:/bin",
		"HOME=" + filepath.Join(dir, "home"),
		"AGENTA_RUNNER_DATA_DIR=" + filepath.Join(dir, "data"),
		"AGENTA_RUNNER_TOKEN=" + testToken,
	}, append(env, "LISTEN_FDS=1")...)
	s.cmd.ExtraFiles = []*os.File{sock}
	s.cmd.Stderr, s.cmd.Stdout = logf, logf
	if err := s.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if s.cmd.ProcessState != nil || time.Now().After(deadline) {
			out, _ := os.ReadFile(s.log)
			b.Fatalf("runner serve not ready: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newConnClient opens a new TCP connection for every request, as
// Agenta's httpx client does.
func newConnClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// pythonAgent writes the Python ACP agent as an executable next to the
// benchmark, with an interpreter the sandbox can see (the host's home,
// where pyenv lives, is hidden in it). It skips without python3.
func pythonAgent(b *testing.B) string {
	b.Helper()
	interp := "/usr/bin/python3"
	if _, err := os.Stat(interp); err != nil {
		p, err := exec.LookPath("python3")
		if err != nil {
			b.Skip("python3 not installed")
		}
		interp = p
	}
	src, err := os.ReadFile(filepath.Join("testdata", "acp_echo_agent.py"))
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "py-echo-agent")
	if err := os.WriteFile(path, append([]byte("#!"+interp+"\n"), src...), 0o755); err != nil {
		b.Fatal(err)
	}
	return path
}

// stdioAgent is the baseline: the same agent driven directly over stdio
// on an open session, no runner in between.
type stdioAgent struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	conn    *jsonrpc.Conn
	session string
}

func startStdioAgent(b *testing.B, path string) *stdioAgent {
	b.Helper()
	a := &stdioAgent{cmd: exec.Command(path)}
	a.cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir()}
	a.in, _ = a.cmd.StdinPipe()
	out, _ := a.cmd.StdoutPipe()
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	a.conn = jsonrpc.New(out, a.in, jsonrpc.HandlerFunc(func(context.Context, string, json.RawMessage, bool) (any, error) { return nil, nil }))
	b.Cleanup(func() { _ = a.in.Close(); _ = a.cmd.Wait(); a.conn.Close() })
	ctx := context.Background()
	if err := a.conn.Call(ctx, "initialize", map[string]any{"protocolVersion": 1}, nil); err != nil {
		b.Fatal(err)
	}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := a.conn.Call(ctx, "session/new", map[string]any{"cwd": "/", "mcpServers": []any{}}, &sess); err != nil {
		b.Fatal(err)
	}
	a.session = sess.SessionID
	return a
}

func (a *stdioAgent) prompt(b *testing.B, text string) {
	if err := a.conn.Call(context.Background(), "session/prompt", map[string]any{"sessionId": a.session, "prompt": []any{map[string]any{"type": "text", "text": text}}}, nil); err != nil {
		b.Fatal(err)
	}
}

// platformSession is a caller holding a session's whole conversation.
type platformSession struct {
	base, harness, id string
	client            *http.Client
	messages          []map[string]any
}

// turn sends the conversation plus text to /stream and reads the NDJSON
// to its result; it returns whether the harness ran warm and how long the
// runner took: from the request to the result line, the client's own
// encoding of the body and decoding of the result left out.
func (p *platformSession) turn(text string) (warm bool, took time.Duration, err error) {
	p.messages = append(p.messages, map[string]any{"role": "user", "content": text})
	body, _ := json.Marshal(map[string]any{"harness": p.harness, "sessionId": p.id, "projectId": "bench", "messages": p.messages})
	req, _ := http.NewRequest("POST", p.base+"/stream", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "application/x-ndjson")
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return false, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		return false, 0, fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Contains(line, []byte(`"mode":"warm"`)) {
			warm = true
		}
		if !bytes.HasPrefix(line, []byte(`{"kind":"result"`)) {
			continue
		}
		took = time.Since(start)
		var rec struct {
			Result struct {
				OK     bool   `json:"ok"`
				Output string `json:"output"`
				Error  string `json:"error"`
			} `json:"result"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return false, 0, err
		}
		if !rec.Result.OK {
			return false, 0, fmt.Errorf("turn failed: %s", rec.Result.Error)
		}
		p.messages = append(p.messages, map[string]any{"role": "assistant", "content": rec.Result.Output})
		return warm, took, nil
	}
	return false, 0, fmt.Errorf("stream ended without a result: %v", sc.Err())
}

// timeHealth times one GET /health on a new connection: the floor of any
// request.
func timeHealth(b *testing.B, client *http.Client, base string) time.Duration {
	start := time.Now()
	resp, err := client.Get(base + "/health")
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("health: status %d", resp.StatusCode)
	}
	return time.Since(start)
}

// percentile of sorted ds, p in [0,100).
func percentile(ds []time.Duration, p int) time.Duration {
	return ds[len(ds)*p/100]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkOutsideWarmTurn is the warm turn as a platform measures it.
// Every iteration times, interleaved so that machine load hits all three
// alike: a GET /health on a new connection, a direct session/prompt to
// the same Python agent over stdio, and a warm turn through the runner
// (new connection, full history, NDJSON to the result). added =
// turn − direct − health, per percentile.
func BenchmarkOutsideWarmTurn(b *testing.B) {
	agentPath := pythonAgent(b)
	iso := benchIsolation(b)
	bin, prof := benchBinary(b)
	s := startBenchServe(b, bin, append(prof.env, "AGENTA_RUNNER_LOCAL_ISOLATION="+iso, "AGENTA_RUNNER_HARNESS_PYECHO="+agentPath)...)
	direct := startStdioAgent(b, agentPath)
	client := newConnClient()
	sess := &platformSession{base: s.base, harness: "pyecho", id: "outside-warm", client: client}
	for i := range 3 { // the first turn is cold
		if _, _, err := sess.turn("warm up " + strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	var turns, directs, healths []time.Duration
	cpu0 := processCPU(b, s.cmd.Process.Pid)
	stopProfile := prof.start(b)
	i := 0
	for b.Loop() {
		i++
		text := "hello " + strconv.Itoa(i)
		healths = append(healths, timeHealth(b, client, s.base))
		start := time.Now()
		direct.prompt(b, text)
		directs = append(directs, time.Since(start))
		warm, took, err := sess.turn(text)
		if err != nil {
			b.Fatal(err)
		}
		turns = append(turns, took)
		if !warm {
			b.Fatalf("turn %d ran cold", i)
		}
	}
	stopProfile()
	// CPU the serve process spent per iteration (a turn and a /health):
	// what the runner costs, whatever the machine's load does to the
	// latencies.
	b.ReportMetric(millis(processCPU(b, s.cmd.Process.Pid)-cpu0)/float64(len(turns)), "serve-cpu-ms/turn")
	for _, ds := range [][]time.Duration{turns, directs, healths} {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	}
	for _, p := range []int{50, 99} {
		suffix := "p" + strconv.Itoa(p) + "-ms"
		b.ReportMetric(millis(percentile(turns, p)), "turn-"+suffix)
		b.ReportMetric(millis(percentile(directs, p)), "direct-"+suffix)
		b.ReportMetric(millis(percentile(healths, p)), "health-"+suffix)
		b.ReportMetric(millis(percentile(turns, p)-percentile(directs, p)-percentile(healths, p)), "added-"+suffix)
	}
	b.ReportMetric(float64(len(sess.messages)), "history-msgs")
	b.Logf("isolation %s; %d turns; machine: %s", iso, len(turns), loadAverage())
}

// processCPU is the user and system CPU time pid has used (/proc/pid/stat,
// in clock ticks of 10 ms: the benchmark's hundreds of turns make it
// fine enough).
func processCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "load unknown"
	}
	return "load " + strings.Join(f[:3], " ")
}

// buildRunner compiles the release binary (CGO off, no -race, no test
// instrumentation) with the given build tags: a benchmark measures what
// ships, so it does not re-execute the test binary as the tests do.
func buildRunner(tb testing.TB, tags ...string) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "runner")
	cmd := exec.Command("go", "build", "-tags="+strings.Join(tags, ","), "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// benchProfile takes a CPU profile and an execution trace of the serve
// process while the benchmark runs, when RUNNER_BENCH_PROFILE_DIR names
// a directory to write them to (never the checkout).
type benchProfile struct {
	dir, addr string
	env       []string
}

// benchBinary is the runner binary to measure: RUNNER_BENCH_BIN (e.g. a
// build of an earlier commit, to compare in one session), else a fresh
// build of this tree, with the pprof hook when profiling.
func benchBinary(b *testing.B) (string, *benchProfile) {
	p := &benchProfile{dir: os.Getenv("RUNNER_BENCH_PROFILE_DIR")}
	var tags []string
	if p.dir != "" {
		p.addr = "127.0.0.1:" + strconv.Itoa(listenPort(b))
		p.env = []string{"RUNNER_PPROF_ADDR=" + p.addr}
		tags = append(tags, "runnerpprof")
	}
	if bin := os.Getenv("RUNNER_BENCH_BIN"); bin != "" {
		return bin, p
	}
	return buildRunner(b, tags...), p
}

// start fetches a CPU profile over the first 5 s of the run, then a 1 s
// execution trace, then the allocations so far; stop waits for them.
func (p *benchProfile) start(b *testing.B) (stop func()) {
	if p.dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, f := range []struct{ name, path string }{
			{"serve-cpu.pprof", "/debug/pprof/profile?seconds=5"},
			{"serve.trace", "/debug/pprof/trace?seconds=1"},
			{"serve-allocs.pprof", "/debug/pprof/allocs"}, // since the start
		} {
			resp, err := http.Get("http://" + p.addr + f.path)
			if err != nil {
				b.Logf("profile %s: %v", f.name, err)
				return
			}
			out, err := os.Create(filepath.Join(p.dir, f.name))
			if err == nil {
				_, err = io.Copy(out, resp.Body)
				out.Close()
			}
			resp.Body.Close()
			if err != nil {
				b.Logf("profile %s: %v", f.name, err)
			}
		}
	}()
	return func() { <-done; b.Logf("profiles in %s", p.dir) }
}
