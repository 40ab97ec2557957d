package runner_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/s3"
	"github.com/agentrunner/runner/internal/workspace/workspacetest"
)

// stsSigner stands for the platform's sign endpoints: every signature
// mints fresh STS keys on the real server, living workspacetest.LeaseLife.
type stsSigner struct {
	sw     *workspacetest.Seaweed
	bucket string
	signs  *int
}

func (s stsSigner) sign(ctx context.Context, prefix string) (workspace.Lease, error) {
	*s.signs++
	return s3.AssumeRole{Lease: workspace.Lease{Endpoint: s.sw.Endpoint, Region: "us-east-1", Bucket: s.bucket, Prefix: prefix,
		AccessKey: workspacetest.AdminKey, SecretKey: workspacetest.AdminSecret}}.Sign(ctx)
}

func (s stsSigner) SignSession(ctx context.Context, id string) (workspace.Lease, error) {
	return s.sign(ctx, "mounts/session-"+id)
}

func (s stsSigner) SignAgent(ctx context.Context, id string) (workspace.Lease, error) {
	return s.sign(ctx, "mounts/agent-"+id)
}

// TestSignedLeasesOutliveTheTurn: a turn that writes for longer than
// several lifetimes of its STS keys (3 s on the real server) keeps
// checkpointing: every file lands, the turn succeeds.
func TestSignedLeasesOutliveTheTurn(t *testing.T) {
	sw := workspacetest.Start(t)
	bucket := sw.Bucket(t)
	signs := 0
	st := sharedStore(t)
	e := durableEnv(t, st, t.TempDir(), func(c *runner.Config) {
		c.CheckpointEvery = 300 * time.Millisecond
		c.Workspaces = workspace.Signed{
			Signer: func(*wire.Request) (workspace.MountSigner, bool) {
				return stsSigner{sw: sw, bucket: bucket, signs: &signs}, true
			},
			NewStore: func(l workspace.Leaser) workspace.Store { return s3.New(l, s3.Options{}) },
		}
	})
	n := 40
	res := e.turn(t, req{session: "s", messages: []string{fmt.Sprintf("exec for i in $(seq %d); do echo $i > f$i.txt; sleep 0.25; done; echo wrote", n)}})
	if !res.res.OK || !strings.Contains(res.res.Output, "wrote") {
		t.Fatalf("turn: %+v", res.res)
	}
	keys := 0
	for o := range sw.Admin().ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Prefix: "mounts/session-s/f", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys++
	}
	if keys != n {
		t.Fatalf("%d of %d files in the store", keys, n)
	}
	if signs < 3 {
		t.Fatalf("%d signatures over a turn of %s with %s leases", signs, time.Duration(n)*250*time.Millisecond, workspacetest.LeaseLife)
	}
}

// TestS3StoreDownFailsTheTurn: a configured S3 store nobody answers at
// fails the turn on acquire, naming the store.
func TestS3StoreDownFailsTheTurn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	lease := workspace.Lease{Endpoint: "http://" + addr, Region: "us-east-1", Bucket: "bucket", Prefix: "p", AccessKey: "k", SecretKey: "s", Permanent: true}
	st := sharedStore(t)
	e := durableEnv(t, st, t.TempDir(), func(c *runner.Config) {
		c.Workspaces = workspace.Configured{Base: s3.New(workspace.NewKeeper(workspace.Static(lease), nil), s3.Options{MaxRetries: 1})}
	})
	res, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"say hi"}}.wire(), nil)
	if err == nil || res.OK {
		t.Fatalf("turn on a store that is down: %+v", res)
	}
	if !errors.Is(err, workspace.ErrStore) || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %v: want an unavailable store error naming %s", err, addr)
	}
}
