package kubernetes_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrunner/runner/internal/wire"
)

// End-to-end turns through `runner serve` on the test cluster, with the
// scripted agent in the sandbox image. Every wait is on a condition (the
// turn's own stream, a watch on the API server), never on time; session
// ids and the serve's replica are new each run, and each test's cleanup
// deletes what its replica left.

// Cold, warm, and a warm pod deleted out of band: the first turn makes a
// pod; the second reaches the same harness process in the same pod; after
// the pod is deleted the next turn finds it gone, makes a new pod and
// replays the history in the same request.
func TestClusterServeTurns(t *testing.T) {
	s := startServe(t)
	// The test cluster's bridge CNI enforces no NetworkPolicy: said at boot.
	if !strings.Contains(s.log.String(), "NETWORK POLICY MAY NOT BE ENFORCED") {
		t.Errorf("the boot log does not warn that network policies may be advisory:\n%s", s.log)
	}
	id := session("turns")
	p1 := "say hello from a pod\npid\nexec id -u; hostname"
	first := s.stream(t, fakeTurn(id, p1), nil)
	wantOK(t, "cold turn", first, "new", "hello from a pod", "10001")
	pod := sessionPod(t, id)
	t.Logf("cold turn in pod %s", pod)
	if !strings.Contains(first.Text(), pod) {
		t.Errorf("the cold turn did not run in pod %s: %q", pod, first.Text())
	}

	p2 := "pid\nexec hostname"
	warm := s.stream(t, fakeTurn(id, p1, first.Result.Output, p2), nil)
	wantOK(t, "warm turn", warm, "warm", pod)
	if pidOf(t, warm) != pidOf(t, first) {
		t.Errorf("the warm turn ran in another agent (pid %s, then %s)", pidOf(t, first), pidOf(t, warm))
	}
	if again := sessionPod(t, id); again != pod {
		t.Errorf("the warm turn made pod %s beside %s", again, pod)
	}

	deletePod(t, pod)
	// The runner's pod watch sees it (an event, not a probe): only then is
	// the next turn sure to find the sandbox gone rather than reach the
	// container the kubelet has not killed yet.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if !s.log.WaitFor(ctx, "out of band", pod) {
		t.Fatalf("the runner did not report pod %s deleted out of band", pod)
	}
	t.Logf("the runner saw pod %s deleted", pod)
	p3 := "say back again\nexec hostname"
	after := s.stream(t, fakeTurn(id, p1, first.Result.Output, p2, warm.Result.Output, p3), nil)
	wantOK(t, "turn after the warm pod was deleted", after, "replay", "back again")
	fresh := sessionPod(t, id)
	if fresh == pod || !strings.Contains(after.Text(), fresh) {
		t.Errorf("the turn after the deletion ran in %q (pods: deleted %s, now %s)", after.Text(), pod, fresh)
	}
}

// A pod deleted while its turn runs: the turn ends with an error naming
// the sandbox's loss instead of waiting out the agent's sleep; the lost
// sandbox's pod and policy are gone from the cluster; the session's next
// turn runs in a new pod.
func TestClusterServePodDeletedMidTurn(t *testing.T) {
	s := startServe(t)
	id := session("mid")
	var once sync.Once
	var pod string
	p1 := "say started\nsleep 10m\nsay finished"
	lost := s.stream(t, fakeTurn(id, p1), func(ev wire.Event) {
		if ev.Type == "message_delta" && strings.Contains(ev.Delta, "started") {
			once.Do(func() {
				pod = sessionPod(t, id)
				deletePod(t, pod)
			})
		}
	})
	if pod == "" {
		t.Fatalf("the turn never said started:\n%s", lost.Raw)
	}
	if lost.Result.OK || strings.Contains(lost.Text(), "finished") {
		t.Fatalf("the turn whose pod was deleted succeeded: %+v", lost.Result)
	}
	t.Logf("the turn ended with: %s", lost.Result.Error)
	if !strings.Contains(lost.Result.Error, pod) && !strings.Contains(lost.Result.Error, "gone") {
		t.Errorf("the error does not say the sandbox was lost: %q", lost.Result.Error)
	}
	// Nothing of the lost sandbox is left: its policy goes with it.
	waitPolicyDeleted(t, pod)

	next := s.stream(t, fakeTurn(id, p1, lost.Result.Output, "say next\nexec hostname"), nil)
	wantOK(t, "the turn after", next, "", "next")
	if fresh := sessionPod(t, id); fresh == pod || !strings.Contains(next.Text(), fresh) {
		t.Errorf("the next turn ran in %q, not a new pod (lost %s, now %s)", next.Text(), pod, fresh)
	}
}

// The warm ladder through runner serve with parking on: the idle TTL
// parks the session's pod (deleted, its claim kept); the next turn
// resumes it in a new pod with the file the first turn wrote and the
// agent's own transcript loaded natively; once the claim is deleted out
// of band, the next turn falls back to a fresh sandbox in the same
// request. The durable workspace store is off, so the files can only
// have come back from the claim.
func TestClusterServeParking(t *testing.T) {
	s := startServe(t,
		"AGENTA_RUNNER_KUBERNETES_STORAGE_CLASS=runner-local",
		"AGENTA_RUNNER_KUBERNETES_VOLUME_SIZE=1Gi",
		"AGENTA_RUNNER_KUBERNETES_SESSION_IDLE_TTL_MS=1000",
		"AGENTA_RUNNER_STORE_URL=off",
	)
	id := session("park")
	p1 := "exec echo kept > parked.txt && echo written"
	first := s.stream(t, fakeTurn(id, p1), nil)
	wantOK(t, "first turn", first, "new", "written")
	// The claim, not the pod: a loaded machine may park the pod before
	// the test looks.
	sbx := sessionClaim(t, id)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	waitPodDeleted(t, ctx, sbx) // the idle TTL parks it
	ns := envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)
	if _, err := admin(t).CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), sbx, metav1.GetOptions{}); err != nil {
		t.Fatalf("the parked sandbox's claim: %v", err)
	}

	p2 := "exec cat parked.txt\nhistory"
	resumed := s.stream(t, fakeTurn(id, p1, first.Result.Output, p2), nil)
	wantOK(t, "turn after parking", resumed, "load", "kept", "history 1: "+p1)
	if again := sessionClaim(t, id); again != sbx {
		t.Errorf("the resumed turn ran in sandbox %s, not parked sandbox %s", again, sbx)
	}

	waitPodDeleted(t, ctx, sbx)
	if err := admin(t).CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), sbx, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p3 := "say fresh\nexec cat parked.txt || echo no-file"
	fresh := s.stream(t, fakeTurn(id, p1, first.Result.Output, p2, resumed.Result.Output, p3), nil)
	wantOK(t, "turn after the claim was deleted", fresh, "replay", "fresh", "no-file")
	if again := sessionClaim(t, id); again == sbx {
		t.Errorf("the turn after the claim was deleted reused sandbox %s", sbx)
	}
}

// Without parking the idle TTL deletes the pod with its files; the
// durable workspace store (the default directory store) brings the
// workspace back into the session's next pod, and the history is
// replayed to a fresh agent.
func TestClusterServeIdleDurableWorkspace(t *testing.T) {
	s := startServe(t, "AGENTA_RUNNER_KUBERNETES_SESSION_IDLE_TTL_MS=1000")
	id := session("durable")
	p1 := "exec echo kept > durable.txt && echo written; hostname"
	first := s.stream(t, fakeTurn(id, p1), nil)
	wantOK(t, "first turn", first, "new", "written")
	pod := podIn(t, first)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	waitPodDeleted(t, ctx, pod) // the idle TTL destroys it
	next := s.stream(t, fakeTurn(id, p1, first.Result.Output, "exec cat durable.txt; hostname"), nil)
	wantOK(t, "turn after the idle pod was deleted", next, "replay", "kept")
	if again := podIn(t, next); again == pod {
		t.Errorf("the next turn ran in the deleted pod %s", pod)
	}
}

// podIn is the pod a turn's "exec …; hostname" ran in: its last line
// naming a sandbox pod.
func podIn(t *testing.T, tr streamed) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(tr.Text()), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "runner-sbx-") {
			return lines[i]
		}
	}
	t.Fatalf("no pod name in the turn's text %q", tr.Text())
	return ""
}

// wantOK fails the test unless tr succeeded in mode (empty: any) and its
// text has each of contains.
func wantOK(t *testing.T, what string, tr streamed, mode string, contains ...string) {
	t.Helper()
	if !tr.Result.OK {
		t.Fatalf("%s: status %d, error %q\n%s", what, tr.Status, tr.Result.Error, tr.Raw)
	}
	if mode != "" && tr.Mode != mode {
		t.Errorf("%s: mode %q, want %q", what, tr.Mode, mode)
	}
	for _, c := range contains {
		if !strings.Contains(tr.Text(), c) {
			t.Errorf("%s: the text lacks %q:\n%s", what, c, tr.Text())
		}
	}
}

// pidOf is the agent's pid the "pid" directive reported.
func pidOf(t *testing.T, tr streamed) string {
	t.Helper()
	// "say" adds no newline: the pid line may follow other text.
	if _, after, ok := strings.Cut(tr.Text(), "pid "); ok {
		p, _, _ := strings.Cut(after, "\n")
		return p
	}
	t.Fatalf("no pid in %q", tr.Text())
	return ""
}

// sessionClaim is the claim of session's sandbox, found by its annotation.
func sessionClaim(t *testing.T, session string) string {
	t.Helper()
	l, err := admin(t).CoreV1().PersistentVolumeClaims(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)).List(t.Context(), managed)
	if err != nil {
		t.Fatal(err)
	}
	return sessionOwned(t, "claims", session, l.Items)
}

// waitPolicyDeleted waits, on a watch, until sandbox name's NetworkPolicy
// no longer exists.
func waitPolicyDeleted(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := waitDeleted(ctx, admin(t).NetworkingV1().NetworkPolicies(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)), name); err != nil {
		t.Fatalf("the lost sandbox's network policy %s: %v", name, err)
	}
}
