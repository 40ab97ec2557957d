package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

// modelUpstream is an OpenAI-compatible endpoint that records which key
// reached it on which path.
type modelUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "<path> <Authorization>"
}

func newModelUpstream(t *testing.T) *modelUpstream {
	m := &modelUpstream{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.seen = append(m.seen, r.URL.Path+" "+r.Header.Get("Authorization"))
		m.mu.Unlock()
		_, _ = io.WriteString(w, `{"data":[]}`)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *modelUpstream) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.seen...)
}

// prewarmServe is a `runner serve` with pre-warmed fake harnesses.
type prewarmServe struct {
	c      *runnertest.Client
	stderr *runnertest.SyncBuffer
}

func startPrewarm(t *testing.T, extra ...string) *prewarmServe {
	t.Helper()
	ln, base := runnertest.Listen(t)
	env := testEnv(t, append([]string{"AGENTA_RUNNER_TOKEN=" + testToken}, extra...)...)
	ctx, cancel := context.WithCancel(t.Context())
	stderr := &runnertest.SyncBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(withListener(ctx, ln), []string{"serve"}, env, nil, io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("runner log:\n%s", stderr.String())
		}
	})
	runnertest.WaitHealthy(t, base, done, stderr)
	return &prewarmServe{c: &runnertest.Client{Base: base, Token: testToken, Log: stderr}, stderr: stderr}
}

// prewarmHealth is one shape of /health's prewarm list.
type prewarmHealthEntry struct {
	Harness   string           `json:"harness"`
	Slots     int              `json:"slots"`
	Ready     int              `json:"ready"`
	Claimed   int              `json:"claimed"`
	Refilling int              `json:"refilling"`
	Hits      int64            `json:"hits"`
	Misses    map[string]int64 `json:"misses"`
	LastError string           `json:"lastError"`
}

func (r *prewarmServe) health(t *testing.T) prewarmHealthEntry {
	t.Helper()
	code, body := r.c.Call(t, "GET", "/health", nil)
	var h struct {
		Prewarm []prewarmHealthEntry `json:"prewarm"`
	}
	if code != 200 || json.Unmarshal(body, &h) != nil || len(h.Prewarm) != 1 {
		t.Fatalf("/health: %d %s", code, body)
	}
	return h.Prewarm[0]
}

// waitHealth polls /health until cond holds (the slots start in the
// background; how long they take depends on the machine's load).
func (r *prewarmServe) waitHealth(t *testing.T, what string, cond func(prewarmHealthEntry) bool) prewarmHealthEntry {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		h := r.health(t)
		if cond(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /health prewarm %+v\nrunner log:\n%s", what, h, r.stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not ordering events
	}
}

// slotProcs are the fake harnesses running now with a gateway
// placeholder key, by pid: their environment as the harness sees it.
func slotProcs(t *testing.T) map[int]map[string]string {
	t.Helper()
	out := map[int]map[string]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(agenttest.Arg)) {
			continue
		}
		raw, err := os.ReadFile(d + "/environ")
		if err != nil {
			continue
		}
		env := map[string]string{}
		for _, kv := range strings.Split(string(raw), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		if !strings.HasPrefix(env["OPENAI_API_KEY"], "runner-key-") {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		out[pid] = env
	}
	return out
}

// tenantTurn is a new session's turn of the fake harness with its own
// key, model, instructions, file and tool.
func tenantTurn(up *modelUpstream, session, key, model, prompt string, extra map[string]any) map[string]any {
	req := map[string]any{
		"harness": "fake", "sessionId": session, "model": model,
		"messages": []map[string]any{{"role": "user", "content": prompt}},
		"modelConnection": map[string]any{
			"provider": "openai", "deployment": "custom",
			"endpoint":    map[string]any{"baseUrl": up.srv.URL + "/v1"},
			"environment": map[string]any{"OPENAI_BASE_URL": up.srv.URL + "/v1"},
			"credentials": []any{map[string]any{"binding": map[string]any{"kind": "environment", "name": "OPENAI_API_KEY"}, "value": key, "usage": "opaque_http"}},
		},
	}
	for k, v := range extra {
		req[k] = v
	}
	return req
}

// sessionStart is the agent-session event's start and prewarmMiss.
func sessionStart(t *testing.T, tr runnertest.Turn) (start, miss string) {
	t.Helper()
	for _, ev := range tr.Events {
		if ev.Type == wire.EventData && ev.Name == "agent-session" {
			var d map[string]string
			_ = json.Unmarshal(ev.Data, &d)
			return d["start"], d["prewarmMiss"]
		}
	}
	t.Fatalf("no agent-session event:\n%s", tr.Raw)
	return "", ""
}

const identityPrompt = "pid\nmodel\nhttp OPENAI_BASE_URL OPENAI_API_KEY /models\nexec cat AGENTS.md notes.txt"

// TestPrewarmClaimBindsOnlyItsTenant: two new sessions each claim a
// pre-warmed slot. Must hold: before a claim a slot's placeholder key
// reaches nothing; each claimed slot carries its own request's key
// (through the gateway), model, files and tools, and none of the other's;
// the two never share a slot; the pool refills after the claims.
func TestPrewarmClaimBindsOnlyItsTenant(t *testing.T) {
	up := newModelUpstream(t)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"result": "tool answered " + r.Header.Get("Authorization")})
	}))
	defer cb.Close()
	r := startPrewarm(t, "AGENTA_RUNNER_PREWARM=fake:2", "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW="+up.srv.Listener.Addr().String())
	r.waitHealth(t, "two ready slots", func(h prewarmHealthEntry) bool { return h.Ready == 2 })

	// An unclaimed slot's placeholder and base URL reach nothing.
	slots := slotProcs(t)
	if len(slots) != 2 {
		t.Fatalf("%d fake harnesses hold a placeholder key, want the 2 slots", len(slots))
	}
	for pid, env := range slots {
		req, _ := http.NewRequest("GET", env["OPENAI_BASE_URL"]+"/models", nil)
		req.Header.Set("Authorization", "Bearer "+env["OPENAI_API_KEY"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("slot %d: its placeholder got %d through the gateway before any claim, want 403", pid, resp.StatusCode)
		}
	}
	if seen := up.requests(); len(seen) != 0 {
		t.Fatalf("the upstream was reached by an unclaimed slot: %v", seen)
	}

	turn := func(session, key, model, who, prompt string) (runnertest.Turn, string) {
		extra := map[string]any{
			"agentsMd":     "instructions of " + who,
			"harnessFiles": []map[string]any{{"path": "notes.txt", "content": "\nfile of " + who + "\n"}},
			"customTools":  []map[string]any{{"name": "lookup", "inputSchema": map[string]any{"type": "object"}, "readOnly": true}},
			"permissions":  map[string]any{"default": "allow"},
			"toolCallback": map[string]any{"endpoint": cb.URL + "/tools/call", "authorization": "bearer-of-" + who},
		}
		tr := r.c.Stream(t, tenantTurn(up, session, key, model, prompt, extra))
		if tr.Status != 200 || !tr.Result.OK {
			t.Fatalf("turn of %s: %d %s", who, tr.Status, tr.Raw)
		}
		return tr, tr.Text()
	}
	prompt := identityPrompt + "\nmcp agenta-tools lookup {}"
	trA, textA := turn("pw-a", "sk-tenant-a", "model-a", "A", prompt)
	trB, textB := turn("pw-b", "sk-tenant-b", "model-b", "B", prompt)

	for _, c := range []struct {
		who, other string
		tr         runnertest.Turn
		text       string
	}{{"a", "b", trA, textA}, {"b", "a", trB, textB}} {
		if start, miss := sessionStart(t, c.tr); start != "prewarmed" {
			t.Errorf("turn of %s started %q (miss %q), want prewarmed", c.who, start, miss)
		}
		W, O := strings.ToUpper(c.who), strings.ToUpper(c.other)
		for _, want := range []string{"model model-" + c.who, "http 200", "instructions of " + W, "file of " + W, "tool answered Bearer bearer-of-" + W} {
			if !strings.Contains(c.text, want) {
				t.Errorf("turn of %s lacks %q:\n%s", c.who, want, c.text)
			}
		}
		for _, never := range []string{"model-" + c.other, "of " + O, "sk-tenant-"} {
			if strings.Contains(c.text, never) {
				t.Errorf("turn of %s shows %q:\n%s", c.who, never, c.text)
			}
		}
	}
	pid := func(text string) int {
		line, _, _ := strings.Cut(strings.TrimPrefix(text, "pid "), "\n")
		n, _ := strconv.Atoi(line)
		return n
	}
	pa, pb := pid(textA), pid(textB)
	if _, ok := slots[pa]; !ok || pa == pb {
		t.Errorf("turns ran in pids %d and %d, want two distinct pre-warmed slots of %v", pa, pb, slots)
	}
	if diff := strings.Join(up.requests(), "\n"); diff != "/v1/models Bearer sk-tenant-a\n/v1/models Bearer sk-tenant-b" {
		t.Errorf("the upstream saw:\n%s\nwant each tenant's own key, once", diff)
	}

	h := r.waitHealth(t, "refilled after two claims", func(h prewarmHealthEntry) bool { return h.Ready == 2 })
	if h.Hits != 2 || h.Claimed != 2 {
		t.Errorf("after two claims: %+v, want 2 hits and 2 claimed slots", h)
	}
	// The session's next turn continues warm on its own slot.
	tr, _ := turn("pw-a", "sk-tenant-a", "model-a", "A", "pid")
	if start, _ := sessionStart(t, tr); start != "warm" || pid(tr.Text()) != pa {
		t.Errorf("second turn of A started %q in pid %d, want warm in %d", start, pid(tr.Text()), pa)
	}
}

// TestPrewarmFallsBackCold: a request a slot cannot serve runs cold in
// the same turn, counted with its reason: a harness environment the slot
// was not started with (the configuration check), a model the harness
// refuses to switch to (the bind fails: that slot is destroyed), a
// read-only filesystem.
func TestPrewarmFallsBackCold(t *testing.T) {
	up := newModelUpstream(t)
	r := startPrewarm(t, "AGENTA_RUNNER_PREWARM=fake:1", "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW="+up.srv.Listener.Addr().String())
	r.waitHealth(t, "a ready slot", func(h prewarmHealthEntry) bool { return h.Ready == 1 })
	slot := slotProcs(t)

	other := tenantTurn(up, "cold-env", "sk-x", "m", "model", nil)
	other["modelConnection"].(map[string]any)["environment"].(map[string]any)["EXTRA_SETTING"] = "1"
	refused := tenantTurn(up, "cold-bind", "sk-y", "refuse-this-model", "model", nil)
	readonly := tenantTurn(up, "cold-ro", "sk-z", "m", "model", map[string]any{"sandboxPermission": map[string]any{"filesystem": "readonly"}})
	for _, c := range []struct {
		name string
		req  map[string]any
		miss string
	}{{"environment", other, "config"}, {"bind", refused, "bind-failed"}} {
		tr := r.c.Stream(t, c.req)
		if tr.Status != 200 || !tr.Result.OK {
			t.Fatalf("%s: %d %s", c.name, tr.Status, tr.Raw)
		}
		if start, miss := sessionStart(t, tr); start != "cold" || miss != c.miss {
			t.Errorf("%s: started %q with miss %q, want cold with %q", c.name, start, miss, c.miss)
		}
	}
	// Cold, this one fails without isolation (which the test does not
	// need): only the miss is checked.
	_ = r.c.Stream(t, readonly)
	h := r.waitHealth(t, "a slot again", func(h prewarmHealthEntry) bool { return h.Ready == 1 })
	want := map[string]int64{"config": 1, "readonly": 1, "bind-failed": 1}
	for k, n := range want {
		if h.Misses[k] != n {
			t.Errorf("misses %v, want %v", h.Misses, want)
			break
		}
	}
	if h.Hits != 0 || h.Claimed != 0 {
		t.Errorf("%+v: a failed bind left a claimed slot", h)
	}
	for pid, env := range slot {
		// The placeholder too: pids are reused quickly on a busy machine.
		if now, alive := slotProcs(t)[pid]; alive && now["OPENAI_API_KEY"] == env["OPENAI_API_KEY"] {
			t.Errorf("the slot whose bind failed (pid %d) still runs", pid)
		}
	}
}

// TestPrewarmMemoryBudget: slots are started only while they fit the
// budget, each counted at AGENTA_RUNNER_PREWARM_SLOT_MB.
func TestPrewarmMemoryBudget(t *testing.T) {
	r := startPrewarm(t, "AGENTA_RUNNER_PREWARM=fake:4", "AGENTA_RUNNER_PREWARM_MEMORY_MB=1024", "AGENTA_RUNNER_PREWARM_SLOT_MB=512")
	h := r.waitHealth(t, "the budget's two slots", func(h prewarmHealthEntry) bool { return h.Ready == 2 && h.Refilling == 0 })
	if h.Slots != 4 {
		t.Errorf("%+v", h)
	}
	// The metrics say the same.
	if code, body := r.c.Call(t, "GET", "/metrics", nil); code != 200 || !strings.Contains(string(body), `prewarm_slots{harness="fake",provider="local",state="ready"} 2`) {
		t.Errorf("/metrics: %d, no ready-slot gauge of 2:\n%.3000s", code, body)
	}
	// Nothing more is being started: the budget holds, not a slow start.
	if n := len(slotProcs(t)); n != 2 {
		t.Errorf("%d slot harnesses run, want the budget's 2", n)
	}
}
