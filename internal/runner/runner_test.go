package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/pool/pooltest"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace/workspacetest"
)

func TestMain(m *testing.M) {
	agenttest.MaybeRun()
	maybeShim()
	maybeRemote()
	if len(os.Args) > 1 && os.Args[1] == "sandbox-proxy-bridge" {
		os.Exit(local.ProxyBridgeMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == local.NetSetupCommand {
		os.Exit(local.NetSetupMain())
	}
	workspacetest.Main(m) // stops the S3 server the durable tests share, then checks for leaks
}

type env struct {
	svc   *runner.Service
	st    store.Store
	clock *pooltest.Clock
	dir   string
}

type option func(*runner.Config)

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, []sandbox.Provider{p}, opts...)
}

func newEnvWith(t *testing.T, providers []sandbox.Provider, opts ...option) *env {
	t.Helper()
	return newEnvWithStore(t, providers, runnertest.SQLite(t), opts...)
}

func newEnvWithStore(t *testing.T, providers []sandbox.Provider, st store.Store, opts ...option) *env {
	t.Helper()
	dir := t.TempDir()
	clock := pooltest.NewClock(time.Unix(1_000_000, 0))
	cfg := runner.Config{
		Version:         "test",
		DefaultProvider: "local",
		Harnesses: map[string]agent.Spec{
			"fake":  runnertest.Fake(),
			"other": runnertest.Fake(),
		},
		BaseEnv:     []string{"PATH=/usr/bin:/bin"},
		ReplicaID:   "replica-a",
		KeepAlive:   true,
		PoolMax:     8,
		SessionTTL:  time.Minute,
		ApprovalTTL: 10 * time.Minute,
		PoolClock:   clock,
		Logger:      runnertest.Logger(t),
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc := runnertest.Service(t, cfg, providers, st)
	return &env{svc: svc, st: st, clock: clock, dir: dir}
}

type req struct {
	session, harness string
	messages         []string // alternating user, assistant, …, user
	agentsMD         string
	key              string
}

func (r req) wire() *wire.Request {
	w := &wire.Request{Harness: r.harness, SessionID: r.session, ProjectID: "p", AgentsMD: r.agentsMD}
	if w.Harness == "" {
		w.Harness = "fake"
	}
	for i, m := range r.messages {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		w.Messages = append(w.Messages, wire.Message{Role: role, Content: wire.MessageContent{Text: m, IsText: true}})
	}
	if r.key != "" {
		w.ModelConnection = &wire.ModelConnection{Provider: "openai", Deployment: "direct",
			Endpoint:    &wire.Endpoint{BaseURL: "https://api.example.com"},
			Credentials: []wire.Credential{{Binding: wire.Binding{Kind: "environment", Name: "OPENAI_API_KEY"}, Value: r.key, Usage: "opaque_http"}}}
	}
	return w
}

type turnResult struct {
	res    wire.Result
	mode   string
	pid    string
	events []wire.Event
	seqs   []int64
}

var pidRE = regexp.MustCompile(`pid (\d+)`)

func (e *env) turn(t *testing.T, r req) turnResult {
	t.Helper()
	return collect(t, e.svc, r.wire())
}

// collect runs one turn and gathers its events, mode and harness pid.
func collect(t *testing.T, svc *runner.Service, w *wire.Request) turnResult {
	t.Helper()
	var out turnResult
	var mu sync.Mutex
	res, err := svc.Run(t.Context(), w, func(seq int64, ev wire.Event) {
		mu.Lock()
		defer mu.Unlock()
		out.events = append(out.events, ev)
		if seq > 0 {
			out.seqs = append(out.seqs, seq)
		}
		if ev.Type == wire.EventData && ev.Name == "agent-session" {
			var d map[string]string
			_ = json.Unmarshal(ev.Data, &d)
			out.mode = d["mode"]
		}
	})
	if err != nil {
		t.Fatalf("turn %v: %v", w.Messages, err)
	}
	out.res = res
	if m := pidRE.FindStringSubmatch(res.Output); m != nil {
		out.pid = m[1]
	}
	return out
}

func TestWarmContinueKeepsTheHarness(t *testing.T) {
	e := newEnv(t)
	first := e.turn(t, req{session: "s", messages: []string{"pid"}})
	second := e.turn(t, req{session: "s", messages: []string{"pid", first.res.Output, "pid\nhistory"}})
	if first.mode != "new" || second.mode != "warm" {
		t.Fatalf("modes %q then %q", first.mode, second.mode)
	}
	if first.pid == "" || first.pid != second.pid {
		t.Fatalf("harness pid %q then %q: not the same process", first.pid, second.pid)
	}
	if !strings.Contains(second.res.Output, "history 1: pid") {
		t.Errorf("warm turn does not continue the session: %q", second.res.Output)
	}
	// A caller that sends only its newest message also continues warm.
	third := e.turn(t, req{session: "s", messages: []string{"pid"}})
	if third.mode != "warm" || third.pid != first.pid {
		t.Errorf("last-message-only turn: mode %q pid %q", third.mode, third.pid)
	}
}

func TestMismatchForcesCold(t *testing.T) {
	cases := []struct {
		name   string
		second req
		reason string
	}{
		{"config", req{session: "s", agentsMD: "new instructions", messages: []string{"pid", "x", "pid"}}, "config"},
		{"history", req{session: "s", messages: []string{"something else", "x", "pid"}}, "history"},
		{"credentials", req{session: "s", key: "sk-rotated", messages: []string{"pid", "x", "pid"}}, "credentials-rotated"},
		{"harness", req{session: "s", harness: "other", messages: []string{"pid", "x", "pid"}}, "harness or provider changed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			first := e.turn(t, req{session: "s", key: "sk-1", messages: []string{"pid"}})
			if c.second.key == "" {
				c.second.key = "sk-1"
			}
			second := e.turn(t, c.second)
			if second.mode == "warm" || second.pid == first.pid {
				t.Fatalf("mode %q pid %q/%q: warm despite a %s change", second.mode, first.pid, second.pid, c.name)
			}
			var why string
			for _, ev := range second.events {
				if ev.Name == "agent-session.teardown" {
					var d map[string]string
					_ = json.Unmarshal(ev.Data, &d)
					why = d["why"]
				}
			}
			if why != c.reason {
				t.Errorf("teardown reason %q, want %q", why, c.reason)
			}
		})
	}
}

func TestIdleTTLExpires(t *testing.T) {
	e := newEnv(t)
	first := e.turn(t, req{session: "s", messages: []string{"pid"}})
	if e.svc.Warm() != 1 {
		t.Fatalf("warm = %d after a clean turn", e.svc.Warm())
	}
	e.clock.Advance(59 * time.Second)
	if e.svc.Warm() != 1 {
		t.Fatal("expired before its TTL")
	}
	e.clock.Advance(2 * time.Second)
	waitFor(t, func() bool { return e.svc.Warm() == 0 })
	second := e.turn(t, req{session: "s", messages: []string{"pid", "x", "pid\nhistory"}})
	if second.mode == "warm" || second.pid == first.pid {
		t.Fatalf("after TTL: mode %q, pid %s then %s", second.mode, first.pid, second.pid)
	}
}

func TestLRUEviction(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) { c.PoolMax = 1 })
	a := e.turn(t, req{session: "a", messages: []string{"pid"}})
	e.turn(t, req{session: "b", messages: []string{"pid"}})
	waitFor(t, func() bool { return e.svc.Warm() == 1 })
	again := e.turn(t, req{session: "a", messages: []string{"pid", "x", "pid"}})
	if again.mode == "warm" || again.pid == a.pid {
		t.Fatalf("evicted session came back warm: %q", again.mode)
	}
}

func TestKeepAliveOff(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) { c.KeepAlive = false })
	first := e.turn(t, req{session: "s", messages: []string{"pid"}})
	second := e.turn(t, req{session: "s", messages: []string{"pid", "x", "pid"}})
	if e.svc.Warm() != 0 || second.mode == "warm" || first.pid == second.pid {
		t.Fatalf("keepalive off but warm: %q", second.mode)
	}
}

func TestColdReplayFromTheLog(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) { c.KeepAlive = false })
	e.turn(t, req{session: "s", messages: []string{"say my name is Ada"}})
	// The caller sends only the new message: the runner rebuilds the rest.
	second := e.turn(t, req{session: "s", harness: "other", messages: []string{"what is my name?"}})
	if second.mode != "replay" || !strings.Contains(second.res.Output, "user: say my name is Ada") || !strings.Contains(second.res.Output, "assistant: my name is Ada") {
		t.Fatalf("mode %q output %q", second.mode, second.res.Output)
	}
}

// TestFailedTurnIsNotReplayedAsConversation: what a failed turn said (a
// harness's report of an API error, say) stays in the log, marked, but a
// cold replay does not hand it to the model as the assistant's answer.
func TestFailedTurnIsNotReplayedAsConversation(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) { c.KeepAlive = false })
	if res, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"say API Error: 401 invalid key\ncrash 4"}}.wire(), func(int64, wire.Event) {}); err == nil || res.OK {
		t.Fatalf("the crashing turn succeeded: %+v", res)
	}
	second := e.turn(t, req{session: "s", harness: "other", messages: []string{"what happened?"}})
	if !second.res.OK || strings.Contains(second.res.Output, "assistant: API Error") {
		t.Fatalf("replayed the failure as conversation: %q", second.res.Output)
	}
	if !strings.Contains(second.res.Output, "user: say API Error") {
		t.Errorf("the failed turn's user message is conversation and must be replayed: %q", second.res.Output)
	}
}

// TestResultWithoutSessionCarriesTheHarnessSession: a turn sent without a
// sessionId returns the harness's session id there, as the reference
// runner does (its resolveRunSessionId), so a caller can name it.
func TestResultWithoutSessionCarriesTheHarnessSession(t *testing.T) {
	e := newEnv(t)
	r := e.turn(t, req{messages: []string{"say hi"}})
	var agentSession string
	for _, ev := range r.events {
		if ev.Type == wire.EventData && ev.Name == "agent-session" {
			var d map[string]string
			_ = json.Unmarshal(ev.Data, &d)
			agentSession = d["agentSessionId"]
		}
	}
	if agentSession == "" || r.res.SessionID != agentSession {
		t.Fatalf("result sessionId %q, the harness's %q", r.res.SessionID, agentSession)
	}
}

// TestHarnessCostReachesUsage: the cost a harness reports in ACP's
// usage_update (a running total for the session) is each turn's usage.cost
// — the part of the total that turn added — in the usage event and the
// result.
func TestHarnessCostReachesUsage(t *testing.T) {
	e := newEnv(t)
	cost := func(total float64) string {
		return fmt.Sprintf(`update {"sessionUpdate":"usage_update","used":10,"size":100,"cost":{"amount":%g,"currency":"USD"}}`, total)
	}
	first := e.turn(t, req{session: "s", messages: []string{cost(0.125) + "\n" + cost(0.25) + "\nsay one"}})
	second := e.turn(t, req{session: "s", messages: []string{cost(0.75) + "\nsay two"}})
	for i, tc := range []struct {
		r    turnResult
		want float64
	}{{first, 0.25}, {second, 0.5}} {
		if tc.r.res.Usage == nil || tc.r.res.Usage.Cost != tc.want {
			t.Errorf("turn %d: result usage %+v, want cost %g", i+1, tc.r.res.Usage, tc.want)
		}
		var evCost *float64
		for _, ev := range tc.r.events {
			if ev.Type == wire.EventUsage {
				evCost = ev.Cost
			}
		}
		if evCost == nil || *evCost != tc.want {
			t.Errorf("turn %d: usage event cost %v, want %g", i+1, evCost, tc.want)
		}
	}
	if second.mode != "warm" {
		t.Errorf("second turn ran %s, not warm: the baseline test needs one harness", second.mode)
	}
}

func TestLedgerAndEventLog(t *testing.T) {
	e := newEnv(t)
	first := e.turn(t, req{session: "s", messages: []string{"say one"}})
	second := e.turn(t, req{session: "s", messages: []string{"say one", "one", "say two\nusage 2 3"}})
	v, err := e.svc.GetSession(t.Context(), sk("s"))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Turns) != 2 || v.Turns[0].Status != "completed" || v.Turns[1].Status != "completed" || v.Turns[1].Usage.Total != 5 {
		t.Fatalf("turns %+v", v.Turns)
	}
	// Sequence numbers continue across turns without gaps.
	all := append(append([]int64{}, first.seqs...), second.seqs...)
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] {
			t.Fatalf("seqs not increasing: %v", all)
		}
	}
	// Resume from a cursor: everything after it, nothing before.
	cursor := first.seqs[len(first.seqs)-1]
	var got []wire.Record
	if err := e.svc.Events(t.Context(), sk("s"), cursor, false, func(r wire.Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].Seq != cursor+1 {
		t.Fatalf("resume from %d: %+v", cursor, got)
	}
	var userMsgs, types []string
	for _, r := range got {
		types = append(types, r.Event.Type)
		if r.Event.Type == wire.EventMessage && r.Event.Role == "user" {
			userMsgs = append(userMsgs, r.Event.Text)
		}
	}
	if len(userMsgs) != 1 || userMsgs[0] != "say two\nusage 2 3" {
		t.Errorf("user messages after cursor: %q (%v)", userMsgs, types)
	}
}

func TestConcurrentTurnOnOneSessionIsRefused(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var once sync.Once
		_, _ = e.svc.Run(context.Background(), req{session: "s", messages: []string{"say go\nsleep 2s"}}.wire(), func(int64, wire.Event) { once.Do(func() { close(started) }) })
	}()
	<-started
	_, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"hi"}}.wire(), nil)
	if err == nil || !strings.Contains(err.Error(), "already has a turn in flight") {
		t.Fatalf("second concurrent turn: %v", err)
	}
	e.svc.Kill(t.Context(), "s", "p")
	<-done
}

func TestOtherReplicaHoldsTheLease(t *testing.T) {
	e := newEnv(t)
	if _, err := e.st.AcquireLease(t.Context(), sk("s"), "replica-b", time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"hi"}}.wire(), nil)
	if err == nil || !strings.Contains(err.Error(), "replica-b") {
		t.Fatalf("turn on a session leased to another replica: %v", err)
	}
}

func TestDeleteSession(t *testing.T) {
	e := newEnv(t)
	e.turn(t, req{session: "s", messages: []string{"hi"}})
	if err := e.svc.DeleteSession(t.Context(), sk("s")); err != nil {
		t.Fatal(err)
	}
	if e.svc.Warm() != 0 {
		t.Error("warm harness survived DELETE")
	}
	_, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"hi"}}.wire(), nil)
	if err == nil || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("turn on a deleted session: %v", err)
	}
}

func TestRecoverMarksInterruptedTurns(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.st.PutSession(ctx, store.Session{ID: "s", ProjectID: "p", Status: store.SessionActive}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.BeginTurn(ctx, store.Turn{ProjectID: "p", SessionID: "s", Index: 0, Owner: "replica-a", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	n, err := e.svc.Recover(ctx)
	if err != nil || n != 1 {
		t.Fatalf("recover: %d %v", n, err)
	}
	tr, _ := e.st.GetTurn(ctx, sk("s"), 0)
	if tr.Status != store.TurnInterrupted {
		t.Fatalf("status %q", tr.Status)
	}
	next := e.turn(t, req{session: "s", messages: []string{"hi"}})
	if !next.res.OK {
		t.Fatalf("next turn after recovery: %+v", next.res)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestColdReloadViaSessionLoad: with the harness gone, the next turn of a
// session starts a new process that reloads its own transcript from the
// session's durable $HOME (session/load), and is sent only the new text.
func TestColdReloadViaSessionLoad(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) { c.KeepAlive = false })
	first := e.turn(t, req{session: "s", messages: []string{"say remember heron\npid"}})
	second := e.turn(t, req{session: "s", messages: []string{"say remember heron\npid", first.res.Output, "history\npid"}})
	if second.mode != "load" || second.pid == first.pid {
		t.Fatalf("mode %q pids %s/%s", second.mode, first.pid, second.pid)
	}
	if !strings.Contains(second.res.Output, "history 1: say remember heron") || strings.Contains(second.res.Output, "Conversation so far") {
		t.Fatalf("reloaded turn: %q", second.res.Output)
	}
	// A failed turn may leave a partial transcript: the next turn replays.
	if _, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"crash 2"}}.wire(), nil); err == nil {
		t.Fatal("crash turn succeeded")
	}
	third := e.turn(t, req{session: "s", messages: []string{"say after the crash"}})
	if third.mode != "replay" {
		t.Fatalf("after a failed turn: mode %q", third.mode)
	}
}

func TestRunLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs turns into their limits: skipped under -short")
	}
	cases := []struct {
		name   string
		limits runner.Limits
		prompt string
		want   string
	}{
		{"idle", runner.Limits{Idle: 150 * time.Millisecond}, "say hi\nsleep 1h", "AGENTA_RUNNER_RUN_IDLE_TIMEOUT_MS"},
		{"total", runner.Limits{Total: 200 * time.Millisecond}, "say hi\nsleep 1h", "AGENTA_RUNNER_RUN_TOTAL_TIMEOUT_MS"},
		{"ttfb", runner.Limits{TTFB: 150 * time.Millisecond}, "sleep 1h", "AGENTA_RUNNER_RUN_TTFB_TIMEOUT_MS"},
		// A tool call that never ends trips its own limit, however chatty
		// the harness stays.
		{"tool call", runner.Limits{ToolCall: 150 * time.Millisecond}, "toolstart Bash\nsleep 1h", "AGENTA_RUNNER_TOOL_CALL_TIMEOUT_MS"},
		// Trips while the sandbox and harness start: the error still names
		// the limit, not the killed harness.
		{"total during start", runner.Limits{Total: time.Millisecond}, "say hi", "AGENTA_RUNNER_RUN_TOTAL_TIMEOUT_MS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(cfg *runner.Config) { cfg.Limits = c.limits })
			res, err := e.svc.Run(t.Context(), req{messages: []string{c.prompt}}.wire(), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || res.OK || res.StopReason != "cancelled" {
				t.Fatalf("result %+v err %v", res, err)
			}
		})
	}
	// Within the limits nothing trips.
	e := newEnv(t, func(cfg *runner.Config) {
		cfg.Limits = runner.Limits{Total: time.Minute, TTFB: time.Minute, Idle: time.Minute, ToolCall: time.Minute}
	})
	if res, err := e.svc.Run(t.Context(), req{messages: []string{"say fine"}}.wire(), nil); err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	// A tool call's limit ends at its result: the turn outlives it.
	e = newEnv(t, func(cfg *runner.Config) { cfg.Limits = runner.Limits{ToolCall: 100 * time.Millisecond} })
	if res, err := e.svc.Run(t.Context(), req{messages: []string{"tool Bash {} => ok\nsleep 300ms\nsay done"}}.wire(), nil); err != nil || !res.OK {
		t.Fatalf("a finished tool call tripped its limit: %+v %v", res, err)
	}
}

// sk is the key of the session id in project p, the project of the
// tests' requests.
func sk(id string) store.SessionKey { return store.SessionKey{ProjectID: "p", SessionID: id} }
