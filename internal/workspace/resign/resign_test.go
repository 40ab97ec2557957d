package resign_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/resign"
)

// serve starts an endpoint in front of a store nobody listens on: every
// request it forwards fails, so what succeeds or is refused is the
// endpoint's own doing.
func serve(t *testing.T) (*resign.Endpoint, workspace.S3Remote) {
	t.Helper()
	lease := workspace.Lease{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", Bucket: "bkt", Prefix: "base", AccessKey: "k", SecretKey: "s", Permanent: true}
	e, err := resign.Serve(context.Background(), resign.Config{Leases: workspace.NewKeeper(workspace.Static(lease), nil), Prefix: "sessions/p/s1", FailAfter: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, e.Remote()
}

func client(t *testing.T, r workspace.S3Remote, key, secret string) *minio.Client {
	t.Helper()
	c, err := minio.New(strings.TrimPrefix(r.URL, "http://"), &minio.Options{Creds: credentials.NewStaticV4(key, secret, ""), BucketLookup: minio.BucketLookupPath, Region: r.Region, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRemoteIsTheMountsPrefix(t *testing.T) {
	_, r := serve(t)
	if r.Path != "bkt/base/sessions/p/s1" || !strings.HasPrefix(r.URL, "http://127.0.0.1:") {
		t.Fatalf("remote %+v", r)
	}
	if r.AccessKey == "k" || r.SecretKey == "s" {
		t.Fatal("the mount was given the store's keys")
	}
}

func TestRefusals(t *testing.T) {
	_, r := serve(t)
	ctx := context.Background()
	good := client(t, r, r.AccessKey, r.SecretKey)
	cases := []struct {
		name string
		do   func() error
		want string
	}{
		{"wrong secret", func() error {
			_, err := readAll(client(t, r, r.AccessKey, "nope"), ctx, "bkt", "base/sessions/p/s1/f")
			return err
		}, "signature does not match"},
		{"unknown key", func() error {
			_, err := readAll(client(t, r, "other", r.SecretKey), ctx, "bkt", "base/sessions/p/s1/f")
			return err
		}, "unknown access key"},
		{"dot segments", func() error {
			_, err := readAll(good, ctx, "bkt", "base/sessions/p/s1/../s2/f")
			return err
		}, "outside the mount"},
		{"other session", func() error {
			_, err := readAll(good, ctx, "bkt", "base/sessions/p/s10/f")
			return err
		}, "outside the mount"},
		{"other bucket", func() error {
			_, err := readAll(good, ctx, "other", "base/sessions/p/s1/f")
			return err
		}, "not the mount's"},
		{"list elsewhere", func() error {
			for o := range good.ListObjects(ctx, "bkt", minio.ListObjectsOptions{Prefix: "base/sessions/p/"}) {
				return o.Err
			}
			return nil
		}, "outside the mount"},
		{"copy from elsewhere", func() error {
			_, err := good.CopyObject(ctx, minio.CopyDestOptions{Bucket: "bkt", Object: "base/sessions/p/s1/f"}, minio.CopySrcOptions{Bucket: "bkt", Object: "base/sessions/p/s2/secret"})
			return err
		}, "copy source"},
		{"streaming signature", func() error {
			_, err := good.PutObject(ctx, "bkt", "base/sessions/p/s1/f", strings.NewReader("x"), 1, minio.PutObjectOptions{})
			return err
		}, "streaming signatures"},
		{"bucket operation", func() error {
			return good.RemoveBucket(ctx, "bkt")
		}, "not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// readAll GETs key: unlike a HEAD, the refusal's message comes back.
func readAll(c *minio.Client, ctx context.Context, bucket, key string) ([]byte, error) {
	o, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return io.ReadAll(o)
}

// TestStoreDownIsReported: a request inside the mount reaches for the
// store, which is down: the client gets a 503 and Err names the store.
func TestStoreDownIsReported(t *testing.T) {
	e, r := serve(t)
	_, err := client(t, r, r.AccessKey, r.SecretKey).StatObject(context.Background(), "bkt", "base/sessions/p/s1/f", minio.StatObjectOptions{})
	if err == nil {
		t.Fatal("a request to a store that is down succeeded")
	}
	got := e.Err()
	if got == nil || !strings.Contains(got.Error(), "s3://127.0.0.1:1/bkt/base") {
		t.Fatalf("Err = %v, want the store named", got)
	}
}
