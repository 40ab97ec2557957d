// Package workspace keeps a session's files and an agent's shared folder
// durable in an object store, without FUSE and without privileges: a
// sandbox's tree is restored from the store when the sandbox is acquired
// and checkpointed back during and at the end of every turn, incrementally
// by content hash. A manifest in the store keeps what object storage
// cannot: modes, symlinks, empty directories.
//
// Store is the object store (internal/workspace/fs: a directory, the
// embedded default; internal/workspace/s3: any S3-compatible server). A
// CredentialSource signs the short-lived lease an S3 store uses; Keeper
// tracks the lease in use and re-signs it before it runs out.
package workspace

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
)

// Store is a flat object store under one prefix. Keys are relative slash
// paths (ValidKey). Implementations are safe for concurrent use.
type Store interface {
	// Put stores size bytes read from r under key, replacing what was there.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens key; a missing key is an error wrapping errdefs.ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns every key under prefix ("" for all), sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// String names the store for errors and logs (no secrets).
	String() string
}

// ValidKey checks an object key: a relative slash path with no empty, "."
// or ".." segment.
func ValidKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "\x00") {
		return errdefs.Invalidf("object key %q: want a relative slash path", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errdefs.Invalidf("object key %q: empty, . or .. segment", key)
		}
	}
	return nil
}

// ValidPrefix checks a List prefix: empty, or a key or key fragment.
func ValidPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidKey(strings.TrimSuffix(prefix, "/") + "x")
}

// Prefixed returns s seen under prefix (a relative slash path): keys are
// joined to it, List strips it.
func Prefixed(s Store, prefix string) Store {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return s
	}
	return &prefixed{s: s, prefix: prefix + "/"}
}

type prefixed struct {
	s      Store
	prefix string
}

func (p *prefixed) key(k string) (string, error) {
	if err := ValidKey(k); err != nil {
		return "", err
	}
	return p.prefix + k, nil
}

func (p *prefixed) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := p.key(key)
	if err != nil {
		return err
	}
	return p.s.Put(ctx, k, r, size)
}

func (p *prefixed) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := p.key(key)
	if err != nil {
		return nil, err
	}
	return p.s.Get(ctx, k)
}

func (p *prefixed) Delete(ctx context.Context, key string) error {
	k, err := p.key(key)
	if err != nil {
		return err
	}
	return p.s.Delete(ctx, k)
}

func (p *prefixed) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ValidPrefix(prefix); err != nil {
		return nil, err
	}
	keys, err := p.s.List(ctx, p.prefix+prefix)
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, p.prefix)
	}
	return keys, err
}

func (p *prefixed) String() string {
	return strings.TrimSuffix(p.s.String(), "/") + "/" + strings.TrimSuffix(p.prefix, "/")
}

// Lease is a signed, scoped S3 credential: where the store is and the keys
// that open its prefix until ExpiresAt.
type Lease struct {
	Endpoint     string // URL or host:port; empty is AWS
	Region       string
	Bucket       string
	Prefix       string // no leading or trailing slash
	AccessKey    string
	SecretKey    string
	SessionToken string
	ExpiresAt    time.Time
	// Permanent marks keys configured by the operator, which do not expire.
	// A signed lease never sets it: one without ExpiresAt is refused.
	Permanent bool
	// Insecure is plain HTTP (a store on the runner's own network).
	Insecure bool
}

// Location names the lease's store without its keys.
func (l Lease) Location() string {
	host := l.Endpoint
	if host == "" {
		host = "s3.amazonaws.com"
	}
	return "s3://" + strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://") + "/" + path.Join(l.Bucket, l.Prefix)
}

// Check refuses a lease that is unusable at now: missing fields, no
// expiry (unless Permanent), already expired.
func (l Lease) Check(now time.Time) error {
	switch {
	case l.Bucket == "":
		return errdefs.Invalidf("store lease for %s: no bucket", l.Location())
	case l.AccessKey == "" || l.SecretKey == "":
		return errdefs.Invalidf("store lease for %s: no access keys", l.Location())
	case l.ExpiresAt.IsZero() && !l.Permanent:
		return errdefs.Invalidf("store lease for %s: no expiry; a signed credential must say when it expires", l.Location())
	case !l.Permanent && !l.ExpiresAt.After(now):
		return errdefs.Invalidf("store lease for %s: expired at %s", l.Location(), l.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// CredentialSource signs leases: the platform's mount sign endpoints, an
// STS server, or the runner's configuration.
type CredentialSource interface {
	Sign(ctx context.Context) (Lease, error)
}

// ErrStore marks a failure of the durable store (unreachable, refused,
// full): the turn that needed it fails with it.
var ErrStore = errors.New("durable workspace store")

// StoreError wraps err as a failure of the store named.
func StoreError(store, op string, err error) error {
	if errors.Is(err, ErrStore) {
		return err // already names the store
	}
	return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("%w %s: %s: %w", ErrStore, store, op, err))
}

// Host is the lease's endpoint as host[:port], and whether it is reached
// over TLS: a URL's scheme decides, else Insecure.
func (l Lease) Host() (host string, secure bool) {
	host, secure = l.Endpoint, !l.Insecure
	if host == "" {
		host = "s3.amazonaws.com"
	}
	if u, err := url.Parse(host); err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") {
		host, secure = u.Host, u.Scheme == "https"
	}
	return host, secure
}

// RootCAs is the system's roots plus AWS_CA_BUNDLE (a private CA), for a
// TLS store; nil when AWS_CA_BUNDLE is unset (the default roots).
func RootCAs() (*x509.CertPool, error) {
	bundle := os.Getenv("AWS_CA_BUNDLE")
	if bundle == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(bundle)
	if err != nil {
		return nil, errdefs.Invalidf("AWS_CA_BUNDLE: %v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errdefs.Invalidf("AWS_CA_BUNDLE %s: no PEM certificate in it", bundle)
	}
	return pool, nil
}
