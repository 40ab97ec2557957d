package main

import (
	"net/url"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
	"github.com/agentrunner/runner/internal/workspace/s3"
)

// workspaceResolver builds the durable workspace store from
// AGENTA_RUNNER_STORE_URL:
//
//	(unset)                     a directory in the data dir (<data>/workspaces)
//	off                         no durable workspaces: files live in the sandbox only
//	file:///abs/dir or /abs/dir a directory on the runner's disk
//	s3://KEY:SECRET@host:port/bucket[/prefix]?…
//	                            an S3-compatible server (s3.FromURL)
//
// A nil resolver means off.
func workspaceResolver(cfg config.Config) (workspace.Resolver, error) {
	raw := strings.TrimSpace(cfg.Workspace.StoreURL)
	if strings.EqualFold(raw, "off") {
		return nil, nil
	}
	if dir := cfg.StoreDir(); dir != "" {
		st, err := fs.New(dir)
		if err != nil {
			return nil, err
		}
		return workspace.Configured{Base: st}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errdefs.Invalidf("AGENTA_RUNNER_STORE_URL: %v", stripSecret(err.Error(), raw))
	}
	switch u.Scheme {
	case "file":
		return nil, errdefs.Invalidf("AGENTA_RUNNER_STORE_URL: a file URL needs an absolute path (file:///var/lib/runner/workspaces)")
	case "s3":
		return s3.FromURL(u, "AGENTA_RUNNER_STORE_URL")
	}
	return nil, errdefs.Invalidf("AGENTA_RUNNER_STORE_URL: scheme %q: use s3://, file:// or an absolute path, or off", u.Scheme)
}

func stripSecret(msg, raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "***")
		}
	}
	return msg
}
