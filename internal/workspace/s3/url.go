package s3

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
)

// FromURL is the workspace store an s3:// URL names, read from the
// setting named setting (for errors):
//
//	s3://KEY:SECRET@host:port/bucket[/prefix]?region=us-east-1&insecure=1&sts=1&duration=3600
//
// insecure=1 is plain HTTP; with sts=1 the store mints short-lived keys
// (STS AssumeRole, duration seconds, the server's default if unset) and
// re-signs them before 80% of their lifetime, otherwise KEY:SECRET are
// used as they are. KEY and SECRET are percent-encoded.
func FromURL(u *url.URL, setting string) (workspace.Resolver, error) {
	q := u.Query()
	for k := range q {
		switch k {
		case "region", "insecure", "sts", "duration":
		default:
			return nil, errdefs.Invalidf("%s: unknown parameter %q (known: region, insecure, sts, duration)", setting, k)
		}
	}
	key := u.User.Username()
	secret, _ := u.User.Password()
	if u.User == nil || key == "" || secret == "" {
		return nil, errdefs.Invalidf("%s: put the access key and secret in the URL (s3://KEY:SECRET@host/bucket)", setting)
	}
	if u.Host == "" {
		return nil, errdefs.Invalidf("%s: no host (s3://KEY:SECRET@host:port/bucket)", setting)
	}
	bucket, prefix, _ := strings.Cut(strings.Trim(u.Path, "/"), "/")
	if bucket == "" {
		return nil, errdefs.Invalidf("%s: no bucket (s3://KEY:SECRET@host:port/bucket/prefix)", setting)
	}
	region := q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	insecure, err := urlFlag(q, setting, "insecure")
	if err != nil {
		return nil, err
	}
	useSTS, err := urlFlag(q, setting, "sts")
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
				return nil, errdefs.Invalidf("%s: duration %q: want seconds", setting, s)
			}
			d = time.Duration(n) * time.Second
		}
		src = AssumeRole{Lease: lease, Duration: d}
	} else if q.Has("duration") {
		return nil, errdefs.Invalidf("%s: duration needs sts=1", setting)
	}
	k := workspace.NewKeeper(src, nil)
	return workspace.Configured{Base: New(k, Options{}), Keepers: []*workspace.Keeper{k}}, nil
}

func urlFlag(q url.Values, setting, name string) (bool, error) {
	switch q.Get(name) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, errdefs.Invalidf("%s: %s=%q: use 1 or 0", setting, name, q.Get(name))
}
