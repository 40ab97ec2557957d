package runner_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/rclone"
	"github.com/agentrunner/runner/internal/workspace/s3"
	"github.com/agentrunner/runner/internal/workspace/workspacetest"
)

// fuseEnv is a runner whose working directories are rclone mounts of an
// S3 store (the STS keys of sw, lasting workspacetest.LeaseLife), or
// synced with it when mounter is nil. It returns the store's prefix in
// the bucket.
func fuseEnv(t *testing.T, sw *workspacetest.Seaweed, bucket string, cfg *rclone.Config, opts ...option) (*env, *workspace.Keeper, string) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "fuse-" + hex.EncodeToString(b[:])
	e, k := fuseEnvAt(t, sw, bucket, prefix, cfg, opts...)
	return e, k, prefix
}

func fuseEnvAt(t *testing.T, sw *workspacetest.Seaweed, bucket, prefix string, cfg *rclone.Config, opts ...option) (*env, *workspace.Keeper) {
	t.Helper()
	lease := workspace.Lease{Endpoint: sw.Endpoint, Region: "us-east-1", Bucket: bucket, Prefix: prefix,
		AccessKey: workspacetest.AdminKey, SecretKey: workspacetest.AdminSecret, Permanent: true}
	k := workspace.NewKeeper(s3.AssumeRole{Lease: lease}, nil)
	e := durableEnv(t, sharedStore(t), t.TempDir(), append([]option{func(c *runner.Config) {
		c.Workspaces = workspace.Configured{Base: s3.New(k, s3.Options{MaxRetries: 1}), Keepers: []*workspace.Keeper{k}}
		if cfg != nil {
			c.Mounter = rclone.New(*cfg)
		}
	}}, opts...)...)
	return e, k
}

func objects(t *testing.T, sw *workspacetest.Seaweed, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range sw.Admin().ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, strings.TrimPrefix(o.Key, prefix+"/"))
	}
	return keys
}

// TestFuseTurnOutlivesItsLeases: in fuse mode a turn that writes for
// longer than three lifetimes of its STS keys succeeds, and every file it
// wrote through the mount is in the store when its result returns.
func TestFuseTurnOutlivesItsLeases(t *testing.T) {
	sw := workspacetest.S3(t)
	cfg := workspacetest.FUSE(t, 0)
	bucket := sw.Bucket(t)
	e, k, prefix := fuseEnv(t, sw, bucket, &cfg)
	n := 40
	res := e.turn(t, req{session: "s", messages: []string{fmt.Sprintf("exec for i in $(seq %d); do echo $i > f$i.txt; sleep 0.25; done; echo wrote", n)}})
	if !res.res.OK || !strings.Contains(res.res.Output, "wrote") {
		t.Fatalf("turn: %+v", res.res)
	}
	files := 0
	var meta []string
	for _, key := range objects(t, sw, bucket, prefix+"/sessions/p/s") {
		switch {
		case strings.HasPrefix(key, workspace.MetaDir+"/"):
			meta = append(meta, key)
		case strings.HasPrefix(key, "f") && strings.HasSuffix(key, ".txt"):
			files++
		}
	}
	if files != n {
		t.Fatalf("%d of %d files in the store when the turn returned", files, n)
	}
	for _, m := range meta {
		if m == workspace.ManifestKey {
			t.Fatal("fuse mode wrote a sync manifest for the working directory")
		}
	}
	if k.Signs() < 3 {
		t.Fatalf("%d signatures over a turn of %s with %s leases", k.Signs(), time.Duration(n)*250*time.Millisecond, workspacetest.LeaseLife)
	}
	// The next cold turn sees the files through a new mount.
	res = e.turn(t, req{session: "s", messages: []string{"exec cat f7.txt"}})
	if !strings.Contains(res.res.Output, "7") {
		t.Fatalf("second turn: %q", res.res.Output)
	}
}

// TestFuseStoreDownFailsTheTurn: the store stops while a turn writes
// through the mount: the turn fails, naming the store, instead of
// returning files that never reached it.
func TestFuseStoreDownFailsTheTurn(t *testing.T) {
	sw := workspacetest.Start(t)
	cfg := workspacetest.FUSE(t, time.Second)
	bucket := sw.Bucket(t)
	e, _, prefix := fuseEnv(t, sw, bucket, &cfg)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			for _, k := range objects(t, sw, bucket, prefix+"/sessions/p/s") {
				if k == "first.txt" {
					sw.Stop()
					return
				}
			}
			time.Sleep(50 * time.Millisecond) // polling the store for the first upload
		}
	}()
	res, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"exec echo 1 > first.txt; sleep 3; echo 2 > second.txt; echo wrote"}}.wire(), nil)
	<-stopped
	if err == nil || res.OK {
		t.Fatalf("turn with the store down: %+v", res)
	}
	if !errors.Is(err, workspace.ErrStore) || !strings.Contains(err.Error(), sw.Host) {
		t.Fatalf("error %v: want a store error naming %s", err, sw.Host)
	}
}

// TestSyncModeNeverMounts: without a mounter (the default) the working
// directory is restored and checkpointed, never mounted.
func TestSyncModeNeverMounts(t *testing.T) {
	sw := workspacetest.S3(t)
	bucket := sw.Bucket(t)
	e, _, prefix := fuseEnv(t, sw, bucket, nil)
	res := e.turn(t, req{session: "s", messages: []string{"exec echo x > a.txt; grep -c fuse.rclone /proc/self/mountinfo || echo no-mount"}})
	if !strings.Contains(res.res.Output, "no-mount") {
		t.Fatalf("sync mode turn: %q", res.res.Output)
	}
	keys := objects(t, sw, bucket, prefix+"/sessions/p/s")
	if !contains(keys, workspace.ManifestKey) || !contains(keys, "a.txt") {
		t.Fatalf("sync mode store holds %q", keys)
	}
}

// TestModesRefuseEachOthersSessions: a session saved by one mode is
// refused by the other, naming the setting, rather than losing files.
func TestModesRefuseEachOthersSessions(t *testing.T) {
	sw := workspacetest.S3(t)
	cfg := workspacetest.FUSE(t, 0)
	bucket := sw.Bucket(t)
	for _, c := range []struct {
		name        string
		first, then *rclone.Config
		want        string
	}{
		{"sync then fuse", nil, &cfg, "AGENTA_RUNNER_WORKSPACE_MODE=sync"},
		{"fuse then sync", &cfg, nil, "AGENTA_RUNNER_WORKSPACE_MODE=fuse"},
	} {
		t.Run(c.name, func(t *testing.T) {
			first, _, prefix := fuseEnv(t, sw, bucket, c.first)
			if r := first.turn(t, req{session: "m", messages: []string{"exec echo x > a.txt"}}); !r.res.OK {
				t.Fatalf("first turn: %+v", r.res)
			}
			then, _ := fuseEnvAt(t, sw, bucket, prefix, c.then)
			_, err := then.svc.Run(t.Context(), req{session: "m", messages: []string{"exec ls"}}.wire(), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("other mode: %v, want a refusal naming %s", err, c.want)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
