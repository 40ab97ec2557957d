package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

var _ sandbox.Opener = (*Provider)(nil)

var idPattern = regexp.MustCompile(`^local-[0-9a-f]{16}$`)

// Open implements sandbox.Opener for sandboxes an earlier runner process
// left: their processes died with it (die-with-parent, Pdeathsig), so what
// Open returns holds only the directory, for Destroy to reap. Starting
// processes in it works as in a new sandbox.
func (p *Provider) Open(ctx context.Context, id string, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if !idPattern.MatchString(id) {
		return nil, errdefs.Invalidf("local sandbox id %q is malformed", id)
	}
	root := filepath.Join(p.cfg.Dir, id)
	if _, err := os.Stat(root); err != nil {
		if os.IsNotExist(err) {
			return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("local sandbox %s is gone", id))
		}
		return nil, err
	}
	work, home := filepath.Join(root, "work"), filepath.Join(root, "home")
	if spec.StateKey != "" {
		state := p.stateDir(spec.StateKey)
		work, home = filepath.Join(state, "work"), filepath.Join(state, "home")
	}
	mode := spec.Network.Mode
	if mode == "" {
		mode = "on"
	}
	if mode == "allowlist" {
		// The allowlist proxy belonged to the process that died.
		return nil, errdefs.Unprocessablef("local sandbox %s cannot be reopened with network mode allowlist", id)
	}
	sb := &Sandbox{
		p: p, root: root, mode: mode, spec: spec,
		info: sandbox.Info{ID: id, Provider: "local", Workdir: work, Home: home, HostWorkdir: work, Isolation: p.cfg.Isolation},
		log:  p.log.With(logkey.Sandbox, id),
	}
	if p.bw != nil {
		sb.args = p.bw.sandboxArgs(sb)
	}
	return sb, nil
}
