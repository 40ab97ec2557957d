package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/s3"
	"github.com/agentrunner/runner/internal/workspace/workspacetest"
)

func TestMain(m *testing.M) { workspacetest.Main(m) }

func adminLease(sw *workspacetest.Seaweed, bucket string) workspace.Lease {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return workspace.Lease{Endpoint: sw.Endpoint, Region: "us-east-1", Bucket: bucket, Prefix: "t-" + hex.EncodeToString(b[:]),
		AccessKey: workspacetest.AdminKey, SecretKey: workspacetest.AdminSecret, Permanent: true}
}

func TestConformance(t *testing.T) {
	// A CA bundle that cannot be read must not matter to a plain-HTTP store.
	t.Setenv("AWS_CA_BUNDLE", "/nonexistent/ca-bundle.pem")
	sw := workspacetest.S3(t)
	bucket := sw.Bucket(t)
	workspacetest.Run(t, func(t *testing.T) workspace.Store {
		return s3.New(workspace.NewKeeper(workspace.Static(adminLease(sw, bucket)), nil), s3.Options{})
	})
}

// TestShortLeasesKeepWriting writes for longer than three lifetimes of
// the STS keys the server mints: every write lands, none is refused.
func TestShortLeasesKeepWriting(t *testing.T) {
	sw := workspacetest.S3(t)
	bucket := sw.Bucket(t)
	src := s3.AssumeRole{Lease: adminLease(sw, bucket)}
	keeper := workspace.NewKeeper(src, nil)
	st := s3.New(keeper, s3.Options{})
	ctx := context.Background()
	l, err := keeper.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.SessionToken == "" || l.AccessKey == workspacetest.AdminKey {
		t.Fatalf("lease is not an STS credential: %+v", l)
	}
	if life := time.Until(l.ExpiresAt); life > 2*workspacetest.LeaseLife {
		t.Fatalf("lease lives %s, want about %s", life, workspacetest.LeaseLife)
	}
	end := time.Now().Add(3*workspacetest.LeaseLife + time.Second)
	n := 0
	for time.Now().Before(end) {
		v := fmt.Sprint(n)
		if err := st.Put(ctx, "k/"+v, strings.NewReader(v), int64(len(v))); err != nil {
			t.Fatalf("write %d after %d signs: %v", n, keeper.Signs(), err)
		}
		n++
		time.Sleep(100 * time.Millisecond) // pacing writes over real lease lifetimes
	}
	keys, err := st.List(ctx, "k/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != n {
		t.Fatalf("%d objects, wrote %d", len(keys), n)
	}
	if keeper.Signs() < 3 {
		t.Fatalf("signed %d leases over %d lifetimes", keeper.Signs(), 3)
	}
}

// badFirst signs a lease the server refuses, then good ones.
type badFirst struct {
	good  workspace.Lease
	calls atomic.Int32
}

func (b *badFirst) Sign(context.Context) (workspace.Lease, error) {
	l := b.good
	if b.calls.Add(1) == 1 {
		l.AccessKey, l.SecretKey = "revoked-key", "revoked-secret"
	}
	return l, nil
}

// TestRefusedLeaseResignedOnce: a 403 for the credentials leads to one
// re-sign and a retry that succeeds (without the retry, the put fails).
func TestRefusedLeaseResignedOnce(t *testing.T) {
	sw := workspacetest.S3(t)
	src := &badFirst{good: adminLease(sw, sw.Bucket(t))}
	src.good.Permanent = false
	src.good.ExpiresAt = time.Now().Add(time.Hour)
	st := s3.New(workspace.NewKeeper(src, nil), s3.Options{})
	ctx := context.Background()
	if err := st.Put(ctx, "a", bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatalf("put with a refused first lease: %v", err)
	}
	if got := src.calls.Load(); got != 2 {
		t.Fatalf("signed %d times, want 2", got)
	}
	rc, err := st.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "x" {
		t.Fatalf("got %q", b)
	}
}

type alwaysBad struct{ good workspace.Lease }

func (a alwaysBad) Sign(context.Context) (workspace.Lease, error) {
	l := a.good
	l.AccessKey = "revoked-key"
	return l, nil
}

func TestRefusedTwiceFails(t *testing.T) {
	sw := workspacetest.S3(t)
	st := s3.New(workspace.NewKeeper(alwaysBad{adminLease(sw, sw.Bucket(t))}, nil), s3.Options{})
	err := st.Put(context.Background(), "a", bytes.NewReader([]byte("x")), 1)
	if !errors.Is(err, workspace.ErrStore) {
		t.Fatalf("put with refused keys: %v, want a store error", err)
	}
}

// TestStoreDown: no server at the endpoint is a loud error naming it.
func TestStoreDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	lease := workspace.Lease{Endpoint: "http://" + addr, Region: "us-east-1", Bucket: "bucket", Prefix: "p", AccessKey: "k", SecretKey: "s", Permanent: true}
	st := s3.New(workspace.NewKeeper(workspace.Static(lease), nil), s3.Options{MaxRetries: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = st.Put(ctx, "a", bytes.NewReader([]byte("x")), 1)
	if err == nil || !errors.Is(err, workspace.ErrStore) || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("put to a store that is down: %v; want an unavailable store error naming %s", err, addr)
	}
}

func TestUnsignedExpiryRefused(t *testing.T) {
	src := workspace.Static(workspace.Lease{Endpoint: "http://127.0.0.1:1", Bucket: "b", AccessKey: "k", SecretKey: "s"})
	st := s3.New(workspace.NewKeeper(src, nil), s3.Options{})
	err := st.Put(context.Background(), "a", bytes.NewReader(nil), 0)
	if err == nil || !strings.Contains(err.Error(), "no expiry") {
		t.Fatalf("lease without expiry: %v, want refused", err)
	}
}

// TestServerEnforcesExpiry: the test server really refuses STS keys past
// their expiry, so TestShortLeasesKeepWriting cannot pass by accident.
func TestServerEnforcesExpiry(t *testing.T) {
	sw := workspacetest.S3(t)
	bucket := sw.Bucket(t)
	l, err := s3.AssumeRole{Lease: adminLease(sw, bucket)}.Sign(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stale := l
	stale.Permanent, stale.ExpiresAt = true, time.Time{} // used as is, never re-signed
	st := s3.New(workspace.NewKeeper(workspace.Static(stale), nil), s3.Options{})
	// Fresh STS keys can answer 500 for a moment while the server
	// propagates them; what this test asserts is the refusal after expiry.
	for deadline := time.Now().Add(l.ExpiresAt.Sub(time.Now()) / 2); ; {
		err := st.Put(context.Background(), "before", strings.NewReader("x"), 1)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put with fresh STS keys: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling the server's key propagation
	}
	time.Sleep(time.Until(l.ExpiresAt) + time.Second) // past the real expiry
	if err := st.Put(context.Background(), "after", strings.NewReader("x"), 1); err == nil {
		t.Fatal("the server accepted expired STS keys")
	}
}
