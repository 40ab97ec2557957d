package kubernetes_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/wire"
)

// serveToken is the runner's token in the end-to-end tests.
const serveToken = "kube-serve-test-token-7d41c0aa"

var (
	buildOnce sync.Once
	runnerBin string
	buildErr  error
	buildDir  string
)

// runner builds the runner binary once for the package's tests.
func runner(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "kube-serve-bin-")
		if buildErr != nil {
			return
		}
		runnerBin = filepath.Join(buildDir, "runner")
		out, err := exec.Command("go", "build", "-o", runnerBin, "github.com/agentrunner/runner/cmd/runner").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err: err, out: out}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return runnerBin
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build the runner: " + e.err.Error() + "\n" + string(e.out)
}

// serve is one `runner serve` process whose only provider is the test
// cluster, driving the scripted agent the sandbox image carries.
type serve struct {
	client *runnertest.Client
	log    *runnertest.SyncBuffer
	cmd    *exec.Cmd
	done   chan struct{}
}

func startServe(t testing.TB, env ...string) *serve {
	t.Helper()
	kubeconfig := os.Getenv("RUNNER_TEST_KUBE")
	cluster(t)
	bin := runner(t)
	dir := t.TempDir()
	s := &serve{log: &runnertest.SyncBuffer{}, done: make(chan struct{})}
	f, base := runnertest.Socket(t)
	s.client = &runnertest.Client{Base: base, Token: serveToken, Log: s.log}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + dir,
		"AGENTA_RUNNER_DATA_DIR=" + filepath.Join(dir, "data"),
		"AGENTA_RUNNER_TOKEN=" + serveToken,
		"AGENTA_RUNNER_LOG_LEVEL=info",
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
		// The image's scripted agent; the test binary is not in the pod.
		"AGENTA_RUNNER_HARNESS_FAKE=/usr/local/bin/fakeagent",
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
		case <-time.After(90 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
			t.Errorf("runner serve did not stop within 90s of SIGINT")
		}
		if t.Failed() {
			t.Logf("runner serve log:\n%s", s.log)
		}
	})
	runnertest.WaitHealthy(t, base, s.done, s.log)
	return s
}

func fakeTurn(session, prompt string) map[string]any {
	return map[string]any{
		"harness": "fake", "sessionId": session, "projectId": "kube-e2e",
		"messages": []any{map[string]any{"role": "user", "content": prompt}},
	}
}

// sessionPod is the pod of session's sandbox, found by its annotation.
func sessionPod(t *testing.T, session string) string {
	t.Helper()
	pods, err := admin(t).CoreV1().Pods(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)).List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/managed-by=agenta-runner",
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.Annotations["runner.agenta.ai/session-id"] == session && p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("session %s has pods %v, want one", session, names)
	}
	return names[0]
}

func wantOK(t *testing.T, what string, tr runnertest.Turn, contains ...string) {
	t.Helper()
	if !tr.Result.OK {
		t.Fatalf("%s: status %d, error %q\n%s", what, tr.Status, tr.Result.Error, tr.Raw)
	}
	for _, c := range contains {
		if !strings.Contains(tr.Text(), c) {
			t.Errorf("%s: the text lacks %q:\n%s", what, c, tr.Text())
		}
	}
}

// pidOf is the agent's pid the "pid" directive reported.
func pidOf(t *testing.T, tr runnertest.Turn) string {
	t.Helper()
	for _, l := range strings.Split(tr.Text(), "\n") {
		if p, ok := strings.CutPrefix(l, "pid "); ok {
			return p
		}
	}
	t.Fatalf("no pid in %q", tr.Text())
	return ""
}

// Turns through runner serve on the cluster: cold (a pod made), warm (the
// same agent process in the same pod), and after the warm pod was deleted
// out of band (detected, a new pod, the history replayed, the turn
// succeeds in the same request).
func TestClusterServeTurns(t *testing.T) {
	s := startServe(t)
	first := s.client.Stream(t, fakeTurn("e2e-warm", "say hello from a pod\npid\nexec id -u"))
	wantOK(t, "cold turn", first, "hello from a pod", "10001")
	pod := sessionPod(t, "e2e-warm")
	warm := s.client.Stream(t, fakeTurn("e2e-warm", "pid"))
	wantOK(t, "warm turn", warm)
	if pidOf(t, warm) != pidOf(t, first) {
		t.Errorf("the warm turn ran in another agent (pid %s, then %s)", pidOf(t, first), pidOf(t, warm))
	}
	if again := sessionPod(t, "e2e-warm"); again != pod {
		t.Errorf("the warm turn made pod %s beside %s", again, pod)
	}

	deletePod(t, pod)
	after := s.client.Stream(t, fakeTurn("e2e-warm", "say back again\nhistory"))
	wantOK(t, "turn after the warm pod was deleted", after, "back again")
	if again := sessionPod(t, "e2e-warm"); again == pod {
		t.Errorf("the turn after the deletion reused pod %s", pod)
	}
}

// A pod deleted while its turn runs: the turn ends with an error naming
// the sandbox's loss well before the agent's sleep would have, and the
// session's next turn runs in a new pod.
func TestClusterServePodDeletedMidTurn(t *testing.T) {
	s := startServe(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	resp := s.client.Do(t, ctx, "POST", "/stream", fakeTurn("e2e-mid", "say started\nsleep 10m\nsay finished"), "application/x-ndjson")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	started := false
	var result wire.Result
	for sc.Scan() {
		var line struct {
			Type   string       `json:"type"`
			Delta  string       `json:"delta"`
			Result *wire.Result `json:"result"`
		}
		_ = json.Unmarshal(sc.Bytes(), &line)
		if !started && strings.Contains(line.Delta, "started") {
			started = true
			deletePod(t, sessionPod(t, "e2e-mid"))
		}
		if line.Result != nil {
			result = *line.Result
		}
	}
	if !started {
		t.Fatalf("the turn never said started: %v; log:\n%s", sc.Err(), s.log)
	}
	if ctx.Err() != nil {
		t.Fatal("the turn whose pod was deleted did not end within 3 minutes")
	}
	if result.OK {
		t.Errorf("the turn whose pod was deleted succeeded: %+v", result)
	}
	t.Logf("the turn ended with: %s", result.Error)
	next := s.client.Stream(t, fakeTurn("e2e-mid", "say next"))
	wantOK(t, "the turn after", next, "next")
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
		"AGENTA_RUNNER_TOKEN=" + serveToken, "AGENTA_RUNNER_PORT=0", "AGENTA_RUNNER_HOST=127.0.0.1",
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

// The warm ladder through runner serve with parking on: the idle TTL
// parks the session's pod (deleted, its claim kept), the next turn
// resumes it with the workspace as it was, and once the claim is deleted
// out of band the next turn falls back to a fresh sandbox in the same
// request.
func TestClusterServeParking(t *testing.T) {
	s := startServe(t,
		"AGENTA_RUNNER_KUBERNETES_STORAGE_CLASS=runner-local",
		"AGENTA_RUNNER_KUBERNETES_VOLUME_SIZE=1Gi",
		"AGENTA_RUNNER_KUBERNETES_SESSION_IDLE_TTL_MS=1000",
	)
	first := s.client.Stream(t, fakeTurn("e2e-park", "exec echo kept > parked.txt && echo written"))
	wantOK(t, "first turn", first, "written")
	// The claim, not the pod: a loaded machine may park the pod before
	// the test looks.
	pod := sessionClaim(t, "e2e-park")
	waitDeleted(t, pod) // the idle TTL parks it
	ns := envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)
	if _, err := admin(t).CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), pod, metav1.GetOptions{}); err != nil {
		t.Fatalf("the parked sandbox's claim: %v", err)
	}
	resumed := s.client.Stream(t, fakeTurn("e2e-park", "exec cat parked.txt"))
	wantOK(t, "turn after parking", resumed, "kept")
	if again := sessionClaim(t, "e2e-park"); again != pod {
		t.Errorf("the resumed turn ran in sandbox %s, not parked sandbox %s", again, pod)
	}
	waitDeleted(t, pod)
	if err := admin(t).CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := s.client.Stream(t, fakeTurn("e2e-park", "say fresh\nexec cat parked.txt || echo no-file"))
	wantOK(t, "turn after the claim was deleted", fresh, "fresh", "no-file")
	if again := sessionClaim(t, "e2e-park"); again == pod {
		t.Errorf("the turn after the claim was deleted reused sandbox %s", pod)
	}
}

// sessionClaim is the claim of session's sandbox, found by its annotation.
func sessionClaim(t *testing.T, session string) string {
	t.Helper()
	claims, err := admin(t).CoreV1().PersistentVolumeClaims(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)).List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/managed-by=agenta-runner",
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range claims.Items {
		if c.Annotations["runner.agenta.ai/session-id"] == session && c.DeletionTimestamp == nil {
			names = append(names, c.Name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("session %s has claims %v, want one", session, names)
	}
	return names[0]
}

// waitDeleted waits, on a watch, until pod no longer exists.
func waitDeleted(t *testing.T, name string) {
	t.Helper()
	pods := admin(t).CoreV1().Pods(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
		return
	}
	for ev := range w.ResultChan() {
		if ev.Type == "DELETED" {
			return
		}
	}
	t.Fatalf("pod %s was not deleted within 3 minutes", name)
}
