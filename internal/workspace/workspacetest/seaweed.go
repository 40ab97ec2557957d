package workspacetest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/leaktest"
)

// EnvS3 names the SeaweedFS `weed` binary the S3 tests start (.ci/s3.sh
// builds it); unset, they skip.
const EnvS3 = "RUNNER_TEST_S3"

// Admin keys of the test server (loopback only, made up per run).
const (
	AdminKey    = "runner-test-admin"
	AdminSecret = "runner-test-admin-secret"
)

// LeaseLife is how long the STS credentials the test server mints live.
const LeaseLife = 3 * time.Second

// Seaweed is a running SeaweedFS server (master, volume, filer, S3 with
// IAM and STS) on loopback.
type Seaweed struct {
	Endpoint string // http://127.0.0.1:port
	Host     string // 127.0.0.1:port
	cmd      *exec.Cmd
	dir      string
	stopped  chan struct{}

	bucketOnce sync.Once
	bucket     string
	bucketErr  error
}

var (
	once    sync.Once
	shared  *Seaweed
	initErr error
)

// Main runs a test binary's tests, stops the server they started, and
// then fails the binary if a test left a goroutine running (leaktest);
// call it from TestMain.
func Main(m *testing.M) {
	goleak.VerifyTestMain(stopAfter{m}, leaktest.Global()...)
}

// stopAfter stops the shared server once the tests ran, before the leak
// check looks: its waiter is the package's, not a test's.
type stopAfter struct{ m *testing.M }

func (s stopAfter) Run() int {
	code := s.m.Run()
	if shared != nil {
		shared.Stop()
	}
	return code
}

// S3 returns the package's shared server, starting it at first use; it
// skips the test when EnvS3 is unset. The package's TestMain must call
// Main.
func S3(t testing.TB) *Seaweed {
	t.Helper()
	bin := os.Getenv(EnvS3)
	if bin == "" {
		t.Skipf("%s is not set (path to SeaweedFS's weed; .ci/s3.sh builds it)", EnvS3)
	}
	once.Do(func() { shared, initErr = start(bin) })
	if initErr != nil {
		t.Fatalf("start SeaweedFS: %v", initErr)
	}
	return shared
}

func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p+10000 > 65535 {
			continue // weed puts its gRPC port at port+10000
		}
		if g, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			ls = append(ls, g)
			out = append(out, p)
		}
	}
	return out, nil
}

func start(bin string) (*Seaweed, error) {
	dir, err := os.MkdirTemp("", "runner-seaweed-")
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cfg := map[string]any{
		"identities": []any{map[string]any{
			"name":        "admin",
			"credentials": []any{map[string]any{"accessKey": AdminKey, "secretKey": AdminSecret}},
			"actions":     []string{"Admin", "Read", "Write", "List", "Tagging"},
		}},
		"sts": map[string]any{
			"tokenDuration":    LeaseLife.String(),
			"maxSessionLength": "1h",
			"issuer":           "runner-test",
			"signingKey":       base64.StdEncoding.EncodeToString(key),
		},
		"policy": map[string]any{"defaultEffect": "Allow", "storeType": "memory"},
	}
	b, _ := json.Marshal(cfg)
	conf := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "server",
		"-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+strconv.Itoa(ports[0]), "-volume.port="+strconv.Itoa(ports[1]),
		"-filer.port="+strconv.Itoa(ports[2]), "-s3", "-s3.port="+strconv.Itoa(ports[3]),
		"-s3.config="+conf, "-s3.iam.config="+conf,
		"-master.volumeSizeLimitMB=64", "-volume.max=20",
		// Nothing beyond loopback, no fixed ports: no telemetry, no
		// Iceberg or Lance listeners.
		"-master.telemetry=false", "-s3.port.iceberg=0", "-s3.port.lance=0")
	cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Seaweed{Host: "127.0.0.1:" + strconv.Itoa(ports[3]), cmd: cmd, dir: dir, stopped: make(chan struct{})}
	s.Endpoint = "http://" + s.Host
	go func() { _ = cmd.Wait(); logf.Close(); close(s.stopped) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		c := s.Admin()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.ListBuckets(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.stopped:
			log, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			return nil, fmt.Errorf("weed exited: %s", tail(log))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			s.Stop()
			return nil, fmt.Errorf("not ready after 90s (%v): %s", err, tail(log))
		}
		time.Sleep(200 * time.Millisecond) // polling a child process's readiness
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Stop ends the server and removes its data.
func (s *Seaweed) Stop() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.stopped
	_ = os.RemoveAll(s.dir)
}

// Admin is a client with the admin keys.
func (s *Seaweed) Admin() *minio.Client {
	c, _ := minio.New(s.Host, &minio.Options{Creds: credentials.NewStaticV4(AdminKey, AdminSecret, ""), BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
	return c
}

// Bucket returns the server's test bucket, made at first use; tests keep
// apart by prefix (each bucket costs the server volumes of its own).
func (s *Seaweed) Bucket(t testing.TB) string {
	t.Helper()
	s.bucketOnce.Do(func() { s.bucket, s.bucketErr = s.makeBucket() })
	if s.bucketErr != nil {
		t.Fatal(s.bucketErr)
	}
	return s.bucket
}

func (s *Seaweed) makeBucket() (string, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "runner-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := s.Admin().MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return "", fmt.Errorf("make bucket %s: %w", name, err)
	}
	// A bucket's first write allocates its volumes, which takes seconds
	// on a loaded machine and may answer 500 meanwhile: done here, so the
	// test measures the store, not the allocation.
	for {
		_, err := s.Admin().PutObject(ctx, name, "warm-up", strings.NewReader("x"), 1, minio.PutObjectOptions{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("first write to bucket %s: %w", name, err)
		}
		time.Sleep(200 * time.Millisecond) // polling the server's volume allocation
	}
	_ = s.Admin().RemoveObject(ctx, name, "warm-up", minio.RemoveObjectOptions{})
	return name, nil
}

// Start starts a server for one test and stops it when the test ends;
// it skips the test when EnvS3 is unset.
func Start(t testing.TB) *Seaweed {
	t.Helper()
	bin := os.Getenv(EnvS3)
	if bin == "" {
		t.Skipf("%s is not set (path to SeaweedFS's weed; .ci/s3.sh builds it)", EnvS3)
	}
	s, err := start(bin)
	if err != nil {
		t.Fatalf("start SeaweedFS: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
