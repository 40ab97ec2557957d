package kubernetes_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/kubernetes"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// The sandboxes' NetworkPolicies do what they say on the test cluster,
// whose policy controller (kube-router, .ci/kube.sh) enforces them. Two
// targets inside the cluster's netns: a listener in a pod of its own (the
// cluster's pod range, refused by "on") and the kubelet on the node's
// address (a documentation range here, so "on" reaches it). Without an
// enforcing controller the "off" sandbox still connects and the test fails
// saying so. Deleting a policy behind the provider's back shows both
// targets were reachable all along: the policy made the difference.
// Under gVisor too: its pods' traffic still leaves through the pod's veth,
// where the controller's rules are.
func TestClusterNetworkPolicyEnforced(t *testing.T) {
	eachRuntime(t, testNetworkPolicyEnforced)
}

func testNetworkPolicyEnforced(t *testing.T, runtime func(*kubernetes.Config)) {
	p := newProvider(t, runtime)
	listener, node := policyTargets(t)
	off := create(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
	on := create(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "on"}})
	host, _, _ := net.SplitHostPort(node)
	allow := create(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "allowlist", Allow: []string{host + "/32"}}})
	for _, c := range []struct {
		name   string
		sb     sandbox.Sandbox
		addr   string
		reach  bool
		reason string
	}{
		{"off", off, listener, false, "deny all egress"},
		{"off", off, node, false, "deny all egress"},
		{"on", on, listener, false, "the cluster's pod range is refused"},
		{"on", on, node, true, "a public (here: documentation) address is allowed"},
		{"allowlist", allow, node, true, "the listed address is allowed"},
		{"allowlist", allow, listener, false, "only the listed address is allowed"},
	} {
		if err := eventuallyDial(t, c.sb, c.addr, c.reach); err != nil {
			t.Errorf("network %s, %s (%s): %v", c.name, c.addr, c.reason, err)
		}
	}
	if t.Failed() {
		return
	}
	pols := admin(t).NetworkingV1().NetworkPolicies(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace))
	if err := pols.Delete(t.Context(), off.Info().ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{listener, node} {
		if err := eventuallyDial(t, off, addr, true); err != nil {
			t.Errorf("with the off sandbox's policy deleted, %s: %v (the target itself is unreachable: the test proves nothing)", addr, err)
		}
	}
}

// policyTargets starts a pod listening on the pod network (runner
// sandboxd, the one listener the image has) and returns its address and
// that of its node's kubelet.
func policyTargets(t *testing.T) (listener, node string) {
	t.Helper()
	pods := admin(t).CoreV1().Pods(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace))
	name := "policy-target-" + strings.ToLower(fmt.Sprintf("%x", time.Now().UnixNano()))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"runner-test": "policy-target"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "listen",
				Image:           envOr("RUNNER_TEST_KUBE_IMAGE", defaultImage),
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/usr/local/bin/runner", "sandboxd", "--listen", "0.0.0.0:8080", "--state-dir", "/tmp/sd", "--workdir", "/tmp"},
				Env:             []corev1.EnvVar{{Name: "RUNNER_SANDBOXD_TOKEN", Value: "policy-target"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)},
				}, PeriodSeconds: 1},
			}},
		},
	}
	if _, err := pods.Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watch pod %s: %v", name, ev.Object)
		}
		got, ok := ev.Object.(*corev1.Pod)
		if !ok || got.Status.PodIP == "" || got.Status.HostIP == "" {
			continue
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return net.JoinHostPort(got.Status.PodIP, "8080"), net.JoinHostPort(got.Status.HostIP, "10250")
			}
		}
	}
	t.Fatalf("pod %s did not become Ready: %v", name, ctx.Err())
	return "", ""
}

// eventuallyDial dials addr from inside sb until the outcome is want: a
// policy controller applies a new pod's rules some time after the pod
// starts, so the first dials may see the state before. Each dial is
// bounded by the shell's timeout; the whole by a minute.
func eventuallyDial(t *testing.T, sb sandbox.Sandbox, addr string, want bool) error {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	script := fmt.Sprintf(`timeout 2 bash -c 'exec 3<>/dev/tcp/%s/%s' 2>/dev/null && echo open || echo closed`, host, port)
	deadline := time.Now().Add(time.Minute)
	// Paced: each dial is an exec stream through the API server.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last string
	for n := 1; ; n++ {
		out, err := sandboxtest.Sh(t, sb, script)
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		last = strings.TrimSpace(out)
		if (last == "open") == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still %s after %d dials in a minute, want %s (NetworkPolicy not enforced? .ci/kube.sh up starts kube-router unless RUNNER_KUBE_POLICY=none)",
				last, n, map[bool]string{true: "open", false: "closed"}[want])
		}
		<-tick.C
	}
}

// The boot probe tells an enforcing cluster from one that is not: the test
// cluster enforces NetworkPolicy through kube-router, unless it was
// started with RUNNER_KUBE_POLICY=none (then the probe must say the
// policies are advisory). Either way its pod is gone afterwards.
func TestClusterPolicyProbe(t *testing.T) {
	want := os.Getenv("RUNNER_KUBE_POLICY") != "none"
	p := newProvider(t)
	e, err := p.ProbePolicyEnforcement(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !e.Probed || e.Enforced != want {
		t.Errorf("probe: %+v, want probed and enforced=%v", e, want)
	}
	phrase := "NetworkPolicy enforced (probed"
	if !want {
		phrase = "NetworkPolicy is not enforced by this cluster's CNI: sandbox network modes off/on/allowlist are advisory"
	}
	if d, _ := p.Describe()["network_policy"].(string); !strings.Contains(d, phrase) {
		t.Errorf("Describe's network_policy %q, want it to say %q", d, phrase)
	}
	expectNoPods(t, p)
}

// runner serve probes at boot, in the background: it is healthy before
// the probe ends, and then logs the finding and shows it in /health.
func TestClusterServePolicyProbe(t *testing.T) {
	want, health := "NetworkPolicy enforced (probed", "NetworkPolicy enforced (probed"
	if os.Getenv("RUNNER_KUBE_POLICY") == "none" {
		want, health = "KUBERNETES SANDBOX NETWORK POLICY IS NOT ENFORCED", "NetworkPolicy is not enforced by this cluster's CNI"
	}
	s := startServe(t, "AGENTA_RUNNER_KUBERNETES_POLICY_PROBE=on")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if !s.log.WaitFor(ctx, want) {
		t.Fatalf("runner serve did not log %q:\n%s", want, s.log)
	}
	code, body := s.client.Call(t, "GET", "/health", nil)
	if code != 200 || !strings.Contains(string(body), health) {
		t.Errorf("/health: %d %s, want the probe's finding", code, body)
	}
}
