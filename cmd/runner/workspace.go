package main

import (
	"net/url"
	"strconv"
	"strings"
	"time"

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
//	s3://KEY:SECRET@host:port/bucket[/prefix]?region=us-east-1&insecure=1&sts=1&duration=3600
//	                            an S3-compatible server; insecure=1 is plain HTTP; with
//	                            sts=1 the runner mints short-lived keys (STS AssumeRole,
//	                            duration seconds, server default if unset) and re-signs
//	                            them before 80% of their lifetime, otherwise KEY:SECRET
//	                            are used as they are. KEY and SECRET are percent-encoded.
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
		return s3Resolver(u)
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

func s3Resolver(u *url.URL) (workspace.Resolver, error) {
	const v = "AGENTA_RUNNER_STORE_URL"
	q := u.Query()
	for k := range q {
		switch k {
		case "region", "insecure", "sts", "duration":
		default:
			return nil, errdefs.Invalidf("%s: unknown parameter %q (known: region, insecure, sts, duration)", v, k)
		}
	}
	key := u.User.Username()
	secret, _ := u.User.Password()
	if u.User == nil || key == "" || secret == "" {
		return nil, errdefs.Invalidf("%s: put the access key and secret in the URL (s3://KEY:SECRET@host/bucket)", v)
	}
	if u.Host == "" {
		return nil, errdefs.Invalidf("%s: no host (s3://KEY:SECRET@host:port/bucket)", v)
	}
	bucket, prefix, _ := strings.Cut(strings.Trim(u.Path, "/"), "/")
	if bucket == "" {
		return nil, errdefs.Invalidf("%s: no bucket (s3://KEY:SECRET@host:port/bucket/prefix)", v)
	}
	region := q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	insecure, err := storeFlag(q, "insecure")
	if err != nil {
		return nil, err
	}
	useSTS, err := storeFlag(q, "sts")
	if err != nil {
		return nil, err
	}
	lease := workspace.Lease{Endpoint: u.Host, Region: region, Bucket: bucket, Prefix: strings.Trim(prefix, "/"), AccessKey: key, SecretKey: secret, Permanent: true, Insecure: insecure}
	var src workspace.CredentialSource = workspace.Static(lease)
	if useSTS {
		var d time.Duration
		if s := q.Get("duration"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return nil, errdefs.Invalidf("%s: duration %q: want seconds", v, s)
			}
			d = time.Duration(n) * time.Second
		}
		src = s3.AssumeRole{Lease: lease, Duration: d}
	} else if q.Has("duration") {
		return nil, errdefs.Invalidf("%s: duration needs sts=1", v)
	}
	k := workspace.NewKeeper(src, nil)
	return workspace.Configured{Base: s3.New(k, s3.Options{}), Keepers: []*workspace.Keeper{k}}, nil
}

func storeFlag(q url.Values, name string) (bool, error) {
	switch q.Get(name) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, errdefs.Invalidf("AGENTA_RUNNER_STORE_URL: %s=%q: use 1 or 0", name, q.Get(name))
}
