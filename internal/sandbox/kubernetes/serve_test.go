package kubernetes_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

// serveToken is the runner's token in the end-to-end tests.
const serveToken = "kube-serve-test-token-7d41c0aa"

// buildDir holds the binaries the tests built (removed by TestMain).
var buildDir string

var (
	buildMu sync.Mutex
	builds  = map[string]func() (string, error){}
)

// built is the binary of package pkg (a module path), built once for the
// package's tests.
func built(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = sync.OnceValues(func() (string, error) {
			buildMu.Lock()
			var err error
			if buildDir == "" {
				buildDir, err = os.MkdirTemp("", "kube-serve-bin-")
			}
			dir := buildDir
			buildMu.Unlock()
			if err != nil {
				return "", err
			}
			bin := filepath.Join(dir, filepath.Base(pkg))
			if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
				return "", &buildError{err: err, out: out}
			}
			return bin, nil
		})
		builds[pkg] = b
	}
	buildMu.Unlock()
	bin, err := b()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runner is the runner binary.
func runner(t testing.TB) string { return built(t, "github.com/agentrunner/runner/cmd/runner") }

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build: " + e.err.Error() + "\n" + string(e.out)
}

// serve is one `runner serve` process, driving the scripted agent.
type serve struct {
	client *runnertest.Client
	log    *runnertest.SyncBuffer
	cmd    *exec.Cmd
	done   chan struct{}
	// replica is the serve's replica id, which labels its pods, claims
	// and policies: the test's cleanup deletes what carries it.
	replica string
}

// startServe starts a `runner serve` whose only provider is the test
// cluster. Its replica id is new each time, so nothing an earlier run
// left on the cluster is taken for this one's, and what it leaves (a
// parked claim, a pod of a failed test) is deleted at cleanup.
func startServe(t testing.TB, env ...string) *serve {
	t.Helper()
	kubeconfig := os.Getenv("RUNNER_TEST_KUBE")
	cluster(t)
	replica := "e2e-" + randomID()
	// Registered first, so it runs after the serve has stopped.
	t.Cleanup(func() { cleanReplica(t, replica) })
	return startServeProcess(t, replica, append([]string{
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=kubernetes",
		"AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER=kubernetes",
		"AGENTA_RUNNER_KUBERNETES_KUBECONFIG=" + kubeconfig,
		"AGENTA_RUNNER_KUBERNETES_NAMESPACE=" + envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace),
		"AGENTA_RUNNER_KUBERNETES_IMAGE=" + envOr("RUNNER_TEST_KUBE_IMAGE", defaultImage),
		"AGENTA_RUNNER_KUBERNETES_CLUSTER_CIDRS=" + strings.Join(testClusterCIDRs, ","),
		// No CPU or memory requests: the default's 250m each would fit
		// only a few pods on the test cluster's 2-core node.
		"AGENTA_RUNNER_KUBERNETES_RESOURCES={}",
		"AGENTA_RUNNER_KUBERNETES_SESSION_MAX_WARM=4",
		// A loaded machine starts pods slowly; a stuck one still fails
		// well inside the test's timeout.
		"AGENTA_RUNNER_KUBERNETES_PENDING_TIMEOUT_MS=180000",
		// The image's scripted agent; the test binary is not in the pod.
		"AGENTA_RUNNER_HARNESS_FAKE=/usr/local/bin/fakeagent",
		// No boot probe pod among the turns' pods (TestClusterPolicyProbe
		// and TestClusterServePolicyProbe turn it on).
		"AGENTA_RUNNER_KUBERNETES_POLICY_PROBE=off",
	}, env...)...)
}

// startServeProcess starts `runner serve` with env on a socket of its
// own and stops it (SIGINT, which parks or destroys the warm sandboxes)
// at cleanup.
func startServeProcess(t testing.TB, replica string, env ...string) *serve {
	t.Helper()
	bin := runner(t)
	dir := t.TempDir()
	s := &serve{log: &runnertest.SyncBuffer{}, done: make(chan struct{}), replica: replica}
	f, base := runnertest.Socket(t)
	s.client = &runnertest.Client{Base: base, Token: serveToken, Log: s.log}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + dir,
		"AGENTA_RUNNER_DATA_DIR=" + filepath.Join(dir, "data"),
		"AGENTA_RUNNER_TOKEN=" + serveToken,
		"AGENTA_RUNNER_LOG_LEVEL=info",
		"AGENTA_RUNNER_REPLICA_ID=" + replica,
		"LISTEN_FDS=1",
	}, env...)
	s.cmd.ExtraFiles = []*os.File{f}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	err := s.cmd.Start()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(3 * time.Minute):
			_ = s.cmd.Process.Kill()
			<-s.done
			t.Errorf("runner serve did not stop within 3 minutes of SIGINT")
		}
		if t.Failed() {
			t.Logf("runner serve log:\n%s", s.log)
		}
	})
	runnertest.WaitHealthy(t, base, s.done, s.log)
	return s
}

func randomID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// session is a session id no earlier run used.
func session(tag string) string { return "e2e-" + tag + "-" + randomID() }

// cleanReplica deletes the pods, claims and policies labelled with
// replica and waits until its pods are gone.
func cleanReplica(t testing.TB, replica string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 3*time.Minute)
	defer cancel()
	ns := envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)
	c := admin(t)
	sel := metav1.ListOptions{LabelSelector: labels.Set{"runner.agenta.ai/replica": replica}.String()}
	zero := int64(0)
	pods, err := c.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Errorf("cleanup: list pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		_ = c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	if claims, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel); err == nil {
		for _, pvc := range claims.Items {
			_ = c.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvc.Name, metav1.DeleteOptions{})
		}
	}
	if pols, err := c.NetworkingV1().NetworkPolicies(ns).List(ctx, sel); err == nil {
		for _, p := range pols.Items {
			_ = c.NetworkingV1().NetworkPolicies(ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	for _, p := range pods.Items {
		waitPodDeleted(t, ctx, p.Name)
	}
}

// fakeTurn is a turn of the scripted agent: msgs alternate user and
// assistant, the last is the new prompt.
func fakeTurn(session string, msgs ...string) map[string]any {
	var m []any
	for i, c := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		m = append(m, map[string]any{"role": role, "content": c})
	}
	return map[string]any{"harness": "fake", "sessionId": session, "projectId": "kube-e2e", "messages": m}
}

// streamed is a turn read from /stream.
type streamed struct {
	runnertest.Turn
	// Mode is the runner's agent-session mode: new, warm, load (a
	// parked session's transcript loaded natively), replay.
	Mode string
}

// stream sends req to /stream and reads it to its result, for five
// minutes at most (a cold pod on a machine at load 30); each event is
// passed to onEvent (nil: none) as it arrives.
func (s *serve) stream(t testing.TB, req any, onEvent func(wire.Event)) streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	resp := s.client.Do(t, ctx, "POST", "/stream", req, "application/x-ndjson")
	defer resp.Body.Close()
	var tr streamed
	tr.Status = resp.StatusCode
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	sawResult := false
	for sc.Scan() {
		tr.Raw = append(append(tr.Raw, sc.Bytes()...), '\n')
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tr.Result.Error = string(sc.Bytes()) // a non-200 answer's body
			continue
		}
		switch {
		case rec.Event != nil:
			tr.Events = append(tr.Events, *rec.Event)
			if rec.Event.Type == wire.EventData && rec.Event.Name == "agent-session" {
				var d map[string]string
				_ = json.Unmarshal(rec.Event.Data, &d)
				tr.Mode = d["mode"]
			}
			if onEvent != nil {
				onEvent(*rec.Event)
			}
		case rec.Result != nil:
			tr.Result, sawResult = *rec.Result, true
		}
	}
	if !sawResult && tr.Status == 200 {
		t.Fatalf("the stream ended without a result (%v):\n%.2000s\nrunner log:\n%s", sc.Err(), tr.Raw, s.log)
	}
	return tr
}

// managed lists what a runner made.
var managed = metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=agenta-runner"}

// sessionPod is the pod of session's sandbox, found by its annotation.
func sessionPod(t testing.TB, session string) string {
	t.Helper()
	l, err := admin(t).CoreV1().Pods(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)).List(t.Context(), managed)
	if err != nil {
		t.Fatal(err)
	}
	return sessionOwned(t, "pods", session, l.Items)
}

// sessionOwned is the one of items (not being deleted) whose session
// annotation is session.
func sessionOwned[T any, PT interface {
	*T
	metav1.Object
}](t testing.TB, what, session string, items []T) string {
	t.Helper()
	var names []string
	for i := range items {
		o := PT(&items[i])
		if o.GetAnnotations()["runner.agenta.ai/session-id"] == session && o.GetDeletionTimestamp() == nil {
			names = append(names, o.GetName())
		}
	}
	if len(names) != 1 {
		t.Fatalf("session %s has %s %v, want one", session, what, names)
	}
	return names[0]
}

// The boot check: a runner whose Role lacks portforward does not start,
// and says which verb is missing.
func TestClusterServeRBACMissingVerb(t *testing.T) {
	cluster(t)
	bin := runner(t)
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), bin, "serve")
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir,
		"AGENTA_RUNNER_DATA_DIR=" + filepath.Join(dir, "data"),
		"AGENTA_RUNNER_TOKEN=" + serveToken, "AGENTA_RUNNER_PORT=18799", "AGENTA_RUNNER_HOST=127.0.0.1",
		"AGENTA_RUNNER_ENABLED_SANDBOX_PROVIDERS=kubernetes",
		"AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER=kubernetes",
		"AGENTA_RUNNER_KUBERNETES_KUBECONFIG=" + filepath.Join(filepath.Dir(os.Getenv("RUNNER_TEST_KUBE")), "kubeconfig-limited"),
		"AGENTA_RUNNER_KUBERNETES_NAMESPACE=" + envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace),
		"AGENTA_RUNNER_KUBERNETES_IMAGE=" + envOr("RUNNER_TEST_KUBE_IMAGE", defaultImage),
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("runner serve started with a Role lacking portforward:\n%s", out)
	}
	if !strings.Contains(string(out), "create pods/portforward") {
		t.Errorf("runner serve's boot error does not name the missing verb:\n%s", out)
	}
}

// waitPodDeleted waits, on a watch, until pod name no longer exists.
func waitPodDeleted(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	if err := waitDeleted(ctx, admin(t).CoreV1().Pods(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)), name); err != nil {
		t.Errorf("pod %s: %v", name, err)
	}
}

// getWatcher is a typed client of one kind of object.
type getWatcher[T any] interface {
	Get(ctx context.Context, name string, o metav1.GetOptions) (T, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// waitDeleted waits, on a watch, until c's object name no longer exists.
func waitDeleted[T any](ctx context.Context, c getWatcher[T], name string) error {
	w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	defer w.Stop()
	// The watch started first: a deletion after this Get is on it.
	if _, err := c.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			return nil
		}
	}
	return fmt.Errorf("not deleted before the watch ended (%v)", ctx.Err())
}
