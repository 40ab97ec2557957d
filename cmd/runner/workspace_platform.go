package main

import (
	"context"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/platform/agenta"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/s3"
)

// platformWorkspaces wraps the configured resolver (nil: none) with the
// platform's mount sign endpoints when AGENTA_RUNNER_PLATFORM_MOUNTS is
// on: a request carrying the platform's run credential gets its session
// and agent mounts signed by the platform, with that credential.
func platformWorkspaces(cfg config.Config, configured workspace.Resolver) workspace.Resolver {
	if !cfg.Workspace.PlatformMounts || !cfg.Platform.On {
		return configured
	}
	acfg := agenta.Config{Base: cfg.Platform.Base, RefreshInterval: cfg.Platform.RefreshInterval}
	return workspace.Signed{
		Signer: func(r *wire.Request) (workspace.MountSigner, bool) {
			cred := r.TelemetryConfig().Credential()
			if cred == "" {
				return nil, false
			}
			return platformSigner{agenta.NewConn(acfg, agenta.BaseFor(cfg.Platform.Base, r), cred)}, true
		},
		NewStore: func(l workspace.Leaser) workspace.Store { return s3.New(l, s3.Options{}) },
		Fallback: configured,
	}
}

// platformSigner turns the platform's mount credentials into leases.
type platformSigner struct{ s platform.MountSigner }

func (p platformSigner) SignSession(ctx context.Context, sessionID string) (workspace.Lease, error) {
	m, err := p.s.SignSessionMount(ctx, sessionID, "")
	return leaseOf(m), err
}

func (p platformSigner) SignAgent(ctx context.Context, agentID string) (workspace.Lease, error) {
	m, err := p.s.SignAgentMount(ctx, agentID, "")
	return leaseOf(m), err
}

func leaseOf(m platform.MountCredentials) workspace.Lease {
	return workspace.Lease{
		Endpoint: m.Endpoint, Region: m.Region, Bucket: m.Bucket, Prefix: strings.Trim(m.Prefix, "/"),
		AccessKey: m.AccessKey, SecretKey: m.SecretKey, SessionToken: m.SessionToken, ExpiresAt: m.ExpiresAt,
		Insecure: strings.HasPrefix(m.Endpoint, "http://"),
	}
}
