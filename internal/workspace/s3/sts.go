package s3

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
)

// AssumeRole is a CredentialSource that mints short-lived keys with STS
// AssumeRole on the store's own server (SeaweedFS, MinIO, AWS), signed
// with the runner's long-lived keys; the harness-facing side only ever
// uses the minted ones.
type AssumeRole struct {
	Lease workspace.Lease // where, and the long-lived keys that sign the request
	// Duration is the requested lifetime; zero lets the server choose.
	Duration time.Duration
	// Policy is an inline session policy (JSON) narrowing the keys.
	Policy string
	HTTP   *http.Client
}

// Sign implements workspace.CredentialSource.
func (a AssumeRole) Sign(ctx context.Context) (workspace.Lease, error) {
	ep := a.Lease.Endpoint
	if !strings.Contains(ep, "://") {
		scheme := "https://"
		if a.Lease.Insecure {
			scheme = "http://"
		}
		ep = scheme + ep
	}
	opts := credentials.STSAssumeRoleOptions{AccessKey: a.Lease.AccessKey, SecretKey: a.Lease.SecretKey, Location: a.Lease.Region, Policy: a.Policy, RoleSessionName: "agenta-runner"}
	if a.Duration > 0 {
		opts.DurationSeconds = int(a.Duration / time.Second)
	}
	p := &credentials.STSAssumeRole{STSEndpoint: ep, Options: opts, Client: a.HTTP}
	if p.Client == nil {
		tr, err := transport(strings.HasPrefix(ep, "https://"))
		if err != nil {
			return workspace.Lease{}, err
		}
		p.Client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	v, err := p.RetrieveWithCredContext(&credentials.CredContext{Client: p.Client, Endpoint: ep, Context: ctx})
	if err != nil {
		return workspace.Lease{}, errdefs.With(errdefs.ErrUnavailable, err)
	}
	l := a.Lease
	l.AccessKey, l.SecretKey, l.SessionToken, l.ExpiresAt, l.Permanent = v.AccessKeyID, v.SecretAccessKey, v.SessionToken, v.Expiration, false
	return l, nil
}
