package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// turn is one Run in flight.
type turn struct {
	svc    *Service
	plan   *plan
	sink   func(wire.Event)
	log    *slog.Logger
	cancel context.CancelCauseFunc
	done   chan struct{}
	caps   *wire.Capabilities

	// mu guards the following: events arrive on the harness's reader.
	mu     sync.Mutex
	output strings.Builder
	events []wire.Event
}

func (t *turn) waitDone(ctx context.Context) {
	if t.done == nil {
		return
	}
	select {
	case <-t.done:
	case <-ctx.Done():
	}
}

// emit records an event and forwards it to the caller.
func (t *turn) emit(ev wire.Event) {
	t.mu.Lock()
	if ev.Type == wire.EventMessageDelta {
		t.output.WriteString(ev.Delta)
	}
	if !ev.Transient {
		t.events = append(t.events, ev)
	}
	t.mu.Unlock()
	if t.sink != nil {
		t.sink(ev)
	}
}

func (t *turn) run(ctx context.Context) (agent.Outcome, error) {
	defer close(t.done)
	p := t.plan
	t.emit(wire.DataEvent("agent-status", map[string]string{"phase": "environment_starting"}, true))

	prov := t.svc.providers[p.provider]
	start := time.Now()
	sb, err := prov.Create(ctx, sandbox.Spec{
		SessionID: p.req.SessionID,
		ProjectID: projectOf(p.req),
		Network:   sandbox.Network{Mode: p.network, Allow: p.allow},
		ReadOnly:  p.req.SandboxPermission != nil && p.req.SandboxPermission.Filesystem == "readonly",
		Labels:    map[string]string{"session": p.req.SessionID, "turn": p.req.TurnID},
		OnEvent: func(name string, data map[string]any) {
			t.emit(wire.DataEvent(name, data, false))
		},
	})
	if err != nil {
		return agent.Outcome{}, fmt.Errorf("create %s sandbox: %w", p.provider, err)
	}
	info := sb.Info()
	log := t.log.With(logkey.Sandbox, info.ID)
	log.Debug("timing", logkey.Stage, "sandbox_start", logkey.Duration, time.Since(start).Milliseconds())
	var sess agent.Session
	defer func() {
		// Teardown must finish even when the caller went away.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.svc.cfg.TeardownTimeout)
		defer cancel()
		if sess != nil {
			_ = sess.Close(tctx)
		}
		if err := sb.Destroy(tctx); err != nil {
			log.Warn("sandbox teardown failed", logkey.Error, err)
		}
	}()

	if err := t.writeFiles(ctx, sb); err != nil {
		return agent.Outcome{}, err
	}
	start = time.Now()
	sess, err = t.svc.driver.Open(ctx, sb, agent.Options{
		Spec:       p.harness.spec,
		Env:        t.env(info),
		Cwd:        info.Workdir,
		Permission: t.permission,
		Logger:     log,
	})
	if err != nil {
		return agent.Outcome{}, err
	}
	log.Debug("timing", logkey.Stage, "create_session", logkey.Duration, time.Since(start).Milliseconds())
	caps := sess.Info().Capabilities
	t.caps = &caps
	t.emit(wire.DataEvent("agent-status", map[string]string{"phase": "environment_ready"}, true))

	text := replay(p.history, p.tailText, t.svc.cfg.HistoryMaxChars)
	blocks := p.tail
	if text != p.tailText {
		blocks = append([]json.RawMessage{textBlock(text)}, nonText(p.tail)...)
	}
	return sess.Prompt(ctx, blocks, t.emit)
}

func nonText(blocks []json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, b := range blocks {
		var h struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &h) == nil && h.Type != "text" {
			out = append(out, b)
		}
	}
	return out
}

// writeFiles writes the instructions file and harnessFiles before the
// session opens: harnesses read them once, at session start.
func (t *turn) writeFiles(ctx context.Context, sb sandbox.Sandbox) error {
	p := t.plan
	wd := sb.Info().Workdir
	if p.req.AgentsMD != "" {
		name := p.harness.spec.Instructions
		if name == "" {
			name = "AGENTS.md"
		}
		if err := sb.WriteFile(ctx, path.Join(wd, name), []byte(p.req.AgentsMD), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	for i, f := range p.req.HarnessFiles {
		if err := sb.WriteFile(ctx, path.Join(wd, path.Clean(f.Path)), []byte(f.Content), 0o644); err != nil {
			return fmt.Errorf("write harnessFiles[%d] %s: %w", i, f.Path, err)
		}
	}
	return nil
}

// env is the harness's whole environment: base launch variables, the
// sandbox's own HOME, and the materialised model connection. Nothing of
// the runner's own environment is inherited.
func (t *turn) env(info sandbox.Info) []string {
	env := append([]string(nil), t.svc.cfg.BaseEnv...)
	env = append(env, "HOME="+info.Home)
	keys := make([]string, 0, len(t.plan.env))
	for k := range t.plan.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+t.plan.env[k])
	}
	return env
}

// permission answers the harness by the request's permission plan.
func (t *turn) permission(ctx context.Context, req agent.PermissionRequest) agent.Decision {
	verdict := decide(t.plan.req.Permissions, req)
	switch verdict {
	case "allow":
		return agent.Decision{Allow: true}
	case "deny":
		t.emitDenied(req, "denied by the run's permission policy")
		return agent.Decision{Allow: false, Reason: "policy"}
	}
	// "ask" without a human channel: refuse, visibly.
	t.emitDenied(req, "needs approval; approvals are not available on this path")
	return agent.Decision{Allow: false, Reason: "approval unavailable"}
}

func (t *turn) emitDenied(req agent.PermissionRequest, why string) {
	ev := wire.ToolResultEvent(req.ToolCallID, fmt.Sprintf("%s: %s", req.ToolName, why), nil, false)
	ev.Denied = true
	t.emit(ev)
}

// decide is the permission plan's verdict for a harness permission request.
func decide(p *wire.Permissions, req agent.PermissionRequest) string {
	def := "allow_reads"
	if p != nil && p.Default != "" {
		def = p.Default
	}
	switch def {
	case "allow", "deny", "ask":
		return def
	case "allow_reads":
		switch req.Kind {
		case "read", "search", "think", "fetch":
			return "allow"
		}
		return "ask"
	}
	return "ask" // malformed plans fail safe
}
