package local

import "github.com/agentrunner/runner/internal/sandbox"

var _ sandbox.Binder = (*Provider)(nil)

// CanBind implements sandbox.Binder: local sandboxes see host paths.
func (p *Provider) CanBind() bool { return true }
