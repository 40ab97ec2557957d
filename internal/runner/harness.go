package runner

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/agentrunner/runner/internal/agent"
	builtin "github.com/agentrunner/runner/internal/harness" // the harness family's configuration types
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// The harness configuration's types are the harness family's
// (internal/harness, where each harness's policy lives); the turn knows
// them by these names.
type (
	HarnessSetup  = builtin.Setup
	HarnessConfig = builtin.Launch
	HarnessFile   = builtin.LaunchFile
	DiagnoseInput = builtin.DiagnoseInput
	Configurer    = builtin.Configurer
)

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
