package tools

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/agentrunner/runner/internal/errdefs"
)

// AllowlistEnv is the variable that exempts hosts from CheckMCPServer.
const AllowlistEnv = "AGENTA_AGENT_MCPS_HOST_ALLOWLIST"

// CheckMCPServer is the admission check of a user-supplied MCP server URL
// (mcpServers[].connection.url): the harness, not the runner, connects to
// it, from inside the sandbox, so this is the one place it can be refused.
// It must be https and must not resolve to a loopback, private,
// link-local, carrier-grade NAT, metadata or otherwise reserved address,
// unless its host is in cfg.HostAllowlist (AGENTA_AGENT_MCPS_HOST_ALLOWLIST),
// which waives both rules. Errors are errdefs.ErrInvalid (also
// ErrBlocked for a refused address) or errdefs.ErrUnavailable when the
// host does not resolve; each names what to change.
func CheckMCPServer(ctx context.Context, cfg Config, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		// The URL is not echoed: its query may carry a credential.
		return errdefs.Invalidf("not an absolute http(s) URL")
	}
	g := newGuard(cfg.HostAllowlist, cfg.Resolver)
	host := u.Hostname()
	if g.allowed(host) {
		return nil
	}
	if u.Scheme != "https" {
		return errdefs.Invalidf("host %s: https is required; add the host to %s (a comma-separated list of host names) to allow plain http", host, AllowlistEnv)
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	if _, err := g.resolve(ctx, host); err != nil {
		if errors.Is(err, ErrBlocked) {
			return errdefs.With(errdefs.ErrInvalid, fmt.Errorf("%w; add the host to %s (a comma-separated list of host names) to allow it", err, AllowlistEnv))
		}
		return errdefs.With(errdefs.ErrUnavailable, err)
	}
	return nil
}
