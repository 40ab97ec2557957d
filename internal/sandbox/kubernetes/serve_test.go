package kubernetes_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrunner/runner/internal/runnertest"
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
	// "say" adds no newline: the pid line may follow other text.
	if _, after, ok := strings.Cut(tr.Text(), "pid "); ok {
		p, _, _ := strings.Cut(after, "\n")
		return p
	}
	t.Fatalf("no pid in %q", tr.Text())
	return ""
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
