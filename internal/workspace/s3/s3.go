// Package s3 is the workspace store on an S3-compatible server (AWS S3,
// SeaweedFS, Ceph, R2, …) through minio-go. Its keys come from a
// workspace.Leaser: short-lived leases are re-signed before they run out,
// and a request the server refuses for its credentials (403, expired
// token) is retried once with a freshly signed lease, never failed
// silently or retried forever.
package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
)

// Store is one lease's bucket and prefix. Safe for concurrent use.
type Store struct {
	leases workspace.Leaser
	// MaxRetries bounds minio-go's own retries of transport errors and 5xx.
	maxRetries int

	// mu guards the following.
	mu     sync.Mutex
	client *minio.Client
	keyOf  string // the lease the client signs with
	where  string // the last lease's location, for messages
}

// Options tunes a Store.
type Options struct {
	// MaxRetries is minio-go's retry budget per request for transport
	// errors and 5xx; default 3, so an unreachable store fails in seconds.
	MaxRetries int
}

// New returns a store signing with the leases of l.
func New(l workspace.Leaser, opt Options) *Store {
	if opt.MaxRetries <= 0 {
		opt.MaxRetries = 3
	}
	return &Store{leases: l, maxRetries: opt.MaxRetries, where: "s3"}
}

// Leases implements workspace.Leased.
func (s *Store) Leases() workspace.Leaser { return s.leases }

func (s *Store) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.where
}

// Refresh signs a new lease now if the installed one is due; a runner
// calls it on a timer so that a long turn that writes nothing for a while
// still has a valid lease when it writes again.
func (s *Store) Refresh(ctx context.Context) error {
	_, _, err := s.conn(ctx, workspace.Lease{}, false)
	return err
}

// conn returns the client of the current lease, or of a renewed one when
// failed was refused.
func (s *Store) conn(ctx context.Context, failed workspace.Lease, renew bool) (*minio.Client, workspace.Lease, error) {
	var l workspace.Lease
	var err error
	if renew {
		l, err = s.leases.Renew(ctx, failed)
	} else {
		l, err = s.leases.Lease(ctx)
	}
	if err != nil {
		return nil, workspace.Lease{}, workspace.StoreError(s.String(), "sign", err)
	}
	id := l.Endpoint + "\x00" + l.AccessKey + "\x00" + l.SessionToken
	s.mu.Lock()
	defer s.mu.Unlock()
	s.where = l.Location()
	if s.client != nil && s.keyOf == id {
		return s.client, l, nil
	}
	c, err := client(l, s.maxRetries)
	if err != nil {
		return nil, workspace.Lease{}, err
	}
	s.client, s.keyOf = c, id
	return c, l, nil
}

func client(l workspace.Lease, retries int) (*minio.Client, error) {
	host, secure := l.Host()
	tr, err := transport(secure)
	if err != nil {
		return nil, err
	}
	c, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(l.AccessKey, l.SecretKey, l.SessionToken),
		Secure:       secure,
		Region:       l.Region,
		Transport:    tr,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   retries,
	})
	if err != nil {
		return nil, errdefs.Invalidf("store endpoint %q: %v", l.Endpoint, err)
	}
	return c, nil
}

// transport honours AWS_CA_BUNDLE (extra roots for a private CA) on TLS
// endpoints; plain HTTP never reads it.
func transport(secure bool) (http.RoundTripper, error) {
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if !secure {
		return tr, nil
	}
	pool, err := workspace.RootCAs()
	if err != nil || pool == nil {
		return tr, err
	}
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr.TLSClientConfig.RootCAs = pool
	return tr, nil
}

// refused reports an answer that a fresh lease may cure.
func refused(err error) bool {
	r := minio.ToErrorResponse(err)
	switch r.Code {
	case "ExpiredToken", "InvalidToken", "InvalidAccessKeyId", "AccessDenied", "SignatureDoesNotMatch", "TokenRefreshRequired":
		return true
	}
	return r.StatusCode == http.StatusForbidden
}

func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.StatusCode == http.StatusNotFound
}

func objectKey(l workspace.Lease, key string) string {
	if p := strings.Trim(l.Prefix, "/"); p != "" {
		return p + "/" + key
	}
	return key
}

// do runs op with the current lease and, if the server refused that
// lease, once more with a renewed one. rewind prepares a retry (nil: the
// operation cannot be repeated).
func (s *Store) do(ctx context.Context, what string, rewind func() error, op func(*minio.Client, workspace.Lease) error) error {
	c, l, err := s.conn(ctx, workspace.Lease{}, false)
	if err != nil {
		return err
	}
	err = op(c, l)
	if err == nil || !refused(err) || rewind == nil {
		return err
	}
	if rerr := rewind(); rerr != nil {
		return err
	}
	c, l, rerr := s.conn(ctx, l, true)
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	return op(c, l)
}

// Put implements workspace.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := workspace.ValidKey(key); err != nil {
		return err
	}
	var rewind func() error
	if sk, ok := r.(io.Seeker); ok {
		rewind = func() error { _, err := sk.Seek(0, io.SeekStart); return err }
	}
	err := s.do(ctx, "put", rewind, func(c *minio.Client, l workspace.Lease) error {
		_, err := c.PutObject(ctx, l.Bucket, objectKey(l, key), r, size, minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: size >= 0 && size < 64<<20})
		return err
	})
	if err != nil {
		return workspace.StoreError(s.String(), "put "+key, err)
	}
	return nil
}

// Get implements workspace.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := workspace.ValidKey(key); err != nil {
		return nil, err
	}
	var obj io.ReadCloser
	err := s.do(ctx, "get", func() error { return nil }, func(c *minio.Client, l workspace.Lease) error {
		o, err := c.GetObject(ctx, l.Bucket, objectKey(l, key), minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		// The GET happens at the first read: read one byte here, so that a
		// refusal is seen (and retried) now, in one request.
		var first [1]byte
		n, err := o.Read(first[:])
		if err != nil && !errors.Is(err, io.EOF) {
			o.Close()
			return err
		}
		obj = readCloser{Reader: io.MultiReader(bytes.NewReader(first[:n]), o), Closer: o}
		return nil
	})
	if err != nil {
		if notFound(err) {
			return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("%s: no object %s", s, key))
		}
		return nil, workspace.StoreError(s.String(), "get "+key, err)
	}
	return obj, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Delete implements workspace.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := workspace.ValidKey(key); err != nil {
		return err
	}
	err := s.do(ctx, "delete", func() error { return nil }, func(c *minio.Client, l workspace.Lease) error {
		err := c.RemoveObject(ctx, l.Bucket, objectKey(l, key), minio.RemoveObjectOptions{})
		if notFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return workspace.StoreError(s.String(), "delete "+key, err)
	}
	return nil
}

// List implements workspace.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := workspace.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	var keys []string
	err := s.do(ctx, "list", func() error { keys = nil; return nil }, func(c *minio.Client, l workspace.Lease) error {
		base := ""
		if p := strings.Trim(l.Prefix, "/"); p != "" {
			base = p + "/"
		}
		for o := range c.ListObjects(ctx, l.Bucket, minio.ListObjectsOptions{Prefix: base + prefix, Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			keys = append(keys, strings.TrimPrefix(o.Key, base))
		}
		return nil
	})
	if err != nil {
		return nil, workspace.StoreError(s.String(), "list "+prefix, err)
	}
	return keys, nil
}
