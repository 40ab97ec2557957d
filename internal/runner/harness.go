package runner

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// HarnessSetup is what a harness configurer is given for one session.
type HarnessSetup struct {
	Harness string
	// Provider is the sandbox provider the harness runs in ("local",
	// "daytona"): where its installed command lives.
	Provider string
	Request  *wire.Request
	// Env is the materialised model connection (already validated).
	Env map[string]string
	// Home is the session's private $HOME inside the sandbox.
	Home string
	// Root reports whether the harness runs as root inside the sandbox.
	Root bool
}

// HarnessConfig is a harness's own configuration for one session,
// generated from the model connection (issue: real harnesses).
type HarnessConfig struct {
	// Command, if set, replaces the launch table's command (an installed
	// harness resolved to absolute paths).
	Command []string
	// Files are written under Home before the harness starts: path
	// relative to Home → content.
	Files map[string]HarnessFile
	// Env is added to the harness environment.
	Env map[string]string
	// Mode, if set, is applied with session/set_mode (Claude's permission
	// mode, Codex's harnessMode).
	Mode string
	// Diagnose, if set, runs after each turn of the session that the
	// harness ended without an error; an error it returns fails the turn.
	// It is for harnesses that swallow failures (pi-acp ends a failed
	// model call with end_turn and no text; only its session file says
	// why).
	Diagnose func(ctx context.Context, in DiagnoseInput) error
}

// DiagnoseInput is a finished turn, as Diagnose sees it.
type DiagnoseInput struct {
	// Sandbox is where the harness runs; Home is its session's $HOME there.
	Sandbox sandbox.Sandbox
	Home    string
	// AgentSessionID is the harness's own session id.
	AgentSessionID string
	StopReason     string
	// Output is the turn's agent text; ToolCalls counts its tool_call
	// events; Events are all of the turn's events so far.
	Output    string
	ToolCalls int
	Events    []wire.Event
}

// diagnose runs the session's Diagnose, if any, on a turn that ended
// without an error.
func (t *turn) diagnose(ctx context.Context, lv *live, out agent.Outcome) error {
	if lv.diagnose == nil || out.StopReason != agent.StopEndTurn {
		return nil
	}
	evs := t.eventList()
	calls := 0
	for _, ev := range evs {
		if ev.Type == wire.EventToolCall {
			calls++
		}
	}
	return lv.diagnose(ctx, DiagnoseInput{
		Sandbox: lv.sb, Home: lv.sb.Info().Home, AgentSessionID: lv.sess.ID(),
		StopReason: out.StopReason, Output: t.outputText(), ToolCalls: calls, Events: evs,
	})
}

// HarnessFile is one configuration file.
type HarnessFile struct {
	Content []byte
	Mode    uint32
}

// Configurer turns a request into a harness's own configuration. It
// returns a zero HarnessConfig for harnesses it does not know.
type Configurer func(ctx context.Context, s HarnessSetup) (HarnessConfig, error)

// configure runs the configurer and writes its files into the sandbox.
func (c *coldStart) configure(ctx context.Context, sb sandbox.Sandbox, lv *live) (HarnessConfig, error) {
	t := c.t
	if t.svc.cfg.Configure == nil {
		return HarnessConfig{}, nil
	}
	info := sb.Info()
	hc, err := t.svc.cfg.Configure(ctx, HarnessSetup{Harness: t.plan.harness.spec.Name, Provider: t.plan.provider, Request: lv.req, Env: lv.env, Home: info.Home})
	if err != nil {
		return HarnessConfig{}, fmt.Errorf("configure harness %s: %w", t.plan.harness.spec.Name, err)
	}
	for _, n := range slices.Sorted(maps.Keys(hc.Files)) {
		if err := checkRelPath(n); err != nil {
			return HarnessConfig{}, fmt.Errorf("configure harness %s: file %w", t.plan.harness.spec.Name, err)
		}
		f := hc.Files[n]
		mode := f.Mode
		if mode == 0 {
			mode = 0o600
		}
		if err := sb.WriteFile(ctx, path.Join(info.Home, n), f.Content, mode); err != nil {
			return HarnessConfig{}, fmt.Errorf("write harness config %s: %w", n, err)
		}
	}
	return hc, nil
}

// writeFiles writes the instructions file and harnessFiles before the
// session opens: harnesses read them once, at session start.
func (c *coldStart) writeFiles(ctx context.Context, sb sandbox.Sandbox) error {
	t := c.t
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
func (c *coldStart) env(info sandbox.Info, model map[string]string) []string {
	t := c.t
	env := append([]string(nil), t.svc.cfg.BaseEnv...)
	env = append(env, "HOME="+info.Home)
	for _, k := range slices.Sorted(maps.Keys(model)) {
		env = append(env, k+"="+model[k])
	}
	return env
}
