package acp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/acp"
	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	agenttest.MaybeRun()
	goleak.VerifyTestMain(m, leaktest.Global()...)
}

func open(t *testing.T, opts agent.Options) (agent.Session, sandbox.Sandbox) {
	t.Helper()
	return openWith(t, &acp.Driver{ClientVersion: "test", CancelGrace: 2 * time.Second}, opts)
}

func openWith(t *testing.T, d *acp.Driver, opts agent.Options) (agent.Session, sandbox.Sandbox) {
	t.Helper()
	p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	opts.Spec = agent.Spec{Name: "fake", Command: agenttest.Command()}
	opts.Cwd = sb.Info().Workdir
	opts.Env = append(opts.Env, "HOME="+sb.Info().Home, "PATH=/usr/bin:/bin")
	s, err := d.Open(t.Context(), sb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, sb
}

func textPrompt(s string) []json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	return []json.RawMessage{b}
}

type collector struct {
	mu  sync.Mutex
	evs []wire.Event
}

func (c *collector) sink(ev wire.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, ev)
	c.mu.Unlock()
}

func (c *collector) types() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.evs {
		t := e.Type
		if e.Type == wire.EventData {
			t += ":" + e.Name
		}
		out = append(out, t)
	}
	return out
}

func TestPromptMapsUpdates(t *testing.T) {
	s, _ := open(t, agent.Options{})
	var c collector
	out, err := s.Prompt(t.Context(), textPrompt("think hmm\nsay hello world\ntool Read {\"path\":\"a\"} => contents\ntoolupdate g1 shell\nupdate {\"sessionUpdate\":\"brand_new_thing\",\"x\":1}\nusage 3 4"), c.sink)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"thought_start", "thought_delta", "thought_end", "message_start", "message_delta", "message_delta", "message_end",
		"tool_call", "tool_result", "tool_call", "tool_result", "data:acp.brand_new_thing"}
	if diff := cmp.Diff(want, c.types()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if out.StopReason != "end_turn" || out.Usage == nil || out.Usage.Total != 7 {
		t.Errorf("outcome = %+v", out)
	}
}

func TestPermissionAnsweredByKind(t *testing.T) {
	for _, allow := range []bool{true, false} {
		s, _ := open(t, agent.Options{Permission: func(ctx context.Context, r agent.PermissionRequest) agent.Decision {
			return agent.Decision{Allow: allow}
		}})
		var c collector
		if _, err := s.Prompt(t.Context(), textPrompt("permission rm"), c.sink); err != nil {
			t.Fatal(err)
		}
		want := "permission selected:no"
		if allow {
			want = "permission selected:yes-once"
		}
		if got := deltas(c.evs); !strings.Contains(got, want) {
			t.Errorf("allow=%v: output %q, want %q", allow, got, want)
		}
	}
}

func deltas(evs []wire.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == wire.EventMessageDelta {
			b.WriteString(e.Delta)
		}
	}
	return b.String()
}

func TestParkAndResume(t *testing.T) {
	s, _ := open(t, agent.Options{Permission: func(ctx context.Context, r agent.PermissionRequest) agent.Decision {
		return agent.Decision{Park: true}
	}})
	var c collector
	out, err := s.Prompt(t.Context(), textPrompt("permission deploy\nsay after"), c.sink)
	if err != nil {
		t.Fatal(err)
	}
	if out.StopReason != agent.StopPaused || len(out.Parked) != 1 || out.Parked[0].ToolName != "deploy" {
		t.Fatalf("outcome = %+v", out)
	}
	var c2 collector
	out, err = s.Resume(t.Context(), map[string]agent.Decision{out.Parked[0].ID: {Allow: true}}, c2.sink)
	if err != nil {
		t.Fatal(err)
	}
	if out.StopReason != "end_turn" || !strings.Contains(deltas(c2.evs), "permission selected:yes-once") || !strings.Contains(deltas(c2.evs), "after") {
		t.Fatalf("resume: %+v %q", out, deltas(c2.evs))
	}
}

func TestCancelAnswersPendingPermission(t *testing.T) {
	s, _ := open(t, agent.Options{Permission: func(ctx context.Context, r agent.PermissionRequest) agent.Decision {
		<-ctx.Done() // never decides
		return agent.Decision{}
	}})
	ctx, cancel := context.WithCancel(t.Context())
	var c collector
	done := make(chan struct{})
	var out agent.Outcome
	var err error
	go func() {
		out, err = s.Prompt(ctx, textPrompt("sleep 10ms\npermission rm\nsleep 1h"), c.sink)
		close(done)
	}()
	for !strings.Contains(strings.Join(c.types(), ","), "tool_call") {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if err != nil || out.StopReason != agent.StopCancelled {
		t.Fatalf("out=%+v err=%v", out, err)
	}
}

func TestCrashReportsStderr(t *testing.T) {
	s, _ := open(t, agent.Options{})
	_, err := s.Prompt(t.Context(), textPrompt("say bye\ncrash 7"), func(wire.Event) {})
	var ee *agent.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want *agent.ExitError", err)
	}
	if !strings.Contains(ee.StderrTail, "crashing on purpose") || !strings.Contains(err.Error(), "code 7") {
		t.Errorf("err = %v", err)
	}
}

func TestLoadReplaysNothingIntoTurn(t *testing.T) {
	s, sb := open(t, agent.Options{})
	if _, err := s.Prompt(t.Context(), textPrompt("say first"), func(wire.Event) {}); err != nil {
		t.Fatal(err)
	}
	id := s.ID()
	_ = s.Close(context.Background())
	d := &acp.Driver{}
	s2, err := d.Open(t.Context(), sb, agent.Options{Spec: agent.Spec{Name: "fake", Command: agenttest.Command()}, Cwd: sb.Info().Workdir,
		Env: []string{"HOME=" + sb.Info().Home}, LoadSessionID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	if !s2.Info().Loaded || s2.ID() != id {
		t.Fatalf("not loaded: %+v", s2.Info())
	}
	var c collector
	if _, err := s2.Prompt(t.Context(), textPrompt("history"), c.sink); err != nil {
		t.Fatal(err)
	}
	if got := deltas(c.evs); !strings.Contains(got, "history 1: say first") {
		t.Errorf("history = %q", got)
	}
}
