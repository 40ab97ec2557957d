package kubernetes_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/kubernetes"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(suite{m}, append(leaktest.Global(),
		// client-go's process-wide helpers, started on first use.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
		// client-go caches its transports process-wide (one per TLS
		// configuration), and with them their idle HTTP/2 connections to
		// the API server.
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
	)...)
}

// suite removes the runner binary the end-to-end tests built, before the
// leak check.
type suite struct{ m *testing.M }

func (s suite) Run() int {
	code := s.m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	return code
}

// The test cluster: .ci/kube.sh up prints the kubeconfig that
// RUNNER_TEST_KUBE names, and puts the sandbox image and the namespace
// below in it.
const (
	defaultImage     = "runner.local/sandbox:ci"
	defaultNamespace = "runner-sandboxes"
)

// testClusterCIDRs are the test cluster's pod and service ranges.
var testClusterCIDRs = []string{"198.51.100.0/24", "203.0.113.0/24"}

// cluster is the test cluster's REST config. Without RUNNER_TEST_KUBE the
// test skips, saying how to get one; in CI (CI=true) it fails instead, so
// the cluster tests never skip there unseen.
func cluster(t testing.TB) *rest.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("the cluster tests make pods: skipped under -short")
	}
	path := os.Getenv("RUNNER_TEST_KUBE")
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("RUNNER_TEST_KUBE is not set in CI: .ci/run starts the test cluster with .ci/kube.sh up and exports it")
		}
		t.Skip("RUNNER_TEST_KUBE is not set: no test cluster (sudo .ci/kube.sh up prints the kubeconfig to set it to)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("RUNNER_TEST_KUBE=%s: %v", path, err)
	}
	// The tests run many sandboxes at once; client-go's default 5 QPS
	// would queue them behind each other.
	rc.QPS, rc.Burst = 100, 200
	return rc
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// admin is a client of the test cluster for what the tests do behind the
// provider's back (deleting a pod out of band).
func admin(t testing.TB) k8s.Interface {
	t.Helper()
	c, err := k8s.NewForConfig(cluster(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newProvider is a provider on the test cluster with its own replica
// label, so tests that list sandboxes see only theirs.
func newProvider(t testing.TB, edit ...func(*kubernetes.Config)) *kubernetes.Provider {
	t.Helper()
	cfg := kubernetes.Config{
		REST:      cluster(t),
		Namespace: envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace),
		Image:     envOr("RUNNER_TEST_KUBE_IMAGE", defaultImage),
		Version:   "test",
		Replica:   "test-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())),
		// A loaded CI machine starts a pod in seconds, not minutes; a
		// stuck one should fail the test well before its timeout.
		PendingTimeout: 3 * time.Minute,
	}
	if len(cfg.Replica) > 63 {
		cfg.Replica = cfg.Replica[:63]
	}
	cfg.Replica = strings.TrimRight(cfg.Replica, "-")
	for _, c := range testClusterCIDRs {
		cfg.ClusterCIDRs = append(cfg.ClusterCIDRs, netip.MustParsePrefix(c))
	}
	for _, e := range edit {
		e(&cfg)
	}
	p, err := kubernetes.New(cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	// Registered before any sandbox's Destroy, so it runs after them.
	t.Cleanup(func() { p.Close() })
	return p
}

// create makes a sandbox destroyed at the end of the test.
func create(t *testing.T, p sandbox.Provider, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	if spec.SessionID == "" {
		spec.SessionID = t.Name()
	}
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb
}

// gvisorClass is the RuntimeClass .ci/kube.sh makes for gVisor (handler
// runsc).
const gvisorClass = "gvisor"

// eachRuntime runs f once under the cluster's default runtime (runc on the
// test cluster) and once under the gvisor RuntimeClass, as subtests named
// "default" and "gvisor", with the provider option that selects it. A
// cluster without that RuntimeClass skips the gvisor subtest saying so; in
// CI (CI=true) it fails, since .ci/kube.sh always makes it.
func eachRuntime(t *testing.T, f func(t *testing.T, runtime func(*kubernetes.Config))) {
	t.Run("default", func(t *testing.T) { f(t, func(*kubernetes.Config) {}) })
	t.Run(gvisorClass, func(t *testing.T) {
		_, err := admin(t).NodeV1().RuntimeClasses().Get(t.Context(), gvisorClass, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && os.Getenv("CI") == "true":
			t.Fatalf("the test cluster has no RuntimeClass %s in CI: .ci/kube.sh up makes it", gvisorClass)
		case apierrors.IsNotFound(err):
			t.Skipf("the cluster has no RuntimeClass %s (.ci/kube.sh up makes one, handler runsc)", gvisorClass)
		case err != nil:
			t.Fatalf("RuntimeClass %s: %v", gvisorClass, err)
		}
		f(t, func(c *kubernetes.Config) { c.RuntimeClassName = gvisorClass })
	})
}

// Under gVisor's own network stack (RuntimeClass gvisor-netstack, which
// .ci/kube.sh makes) the port-forward is refused inside the pod's network
// namespace for good: Create fails saying why and what to set, not only
// that the daemon did not answer. The wait is cut short by the context; the
// last attempt's error is the refusal or, as often, a bare EOF.
func TestClusterGvisorNetstackRefused(t *testing.T) {
	const class = "gvisor-netstack"
	if _, err := admin(t).NodeV1().RuntimeClasses().Get(t.Context(), class, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) && os.Getenv("CI") != "true" {
			t.Skipf("the cluster has no RuntimeClass %s (.ci/kube.sh up makes one)", class)
		}
		t.Fatalf("RuntimeClass %s: %v", class, err)
	}
	p := newProvider(t, func(c *kubernetes.Config) { c.RuntimeClassName = class })
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	_, err := p.Create(ctx, sandbox.Spec{SessionID: t.Name()})
	if err == nil {
		t.Fatal("Create under gVisor's netstack succeeded: the port-forward reached the daemon")
	}
	for _, want := range []string{"RuntimeClass " + class + ": a runtime with its own network stack", `network = "host"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Create: %v\nwant it to say %q", err, want)
		}
	}
	expectNoPods(t, p)
}

func TestClusterConformance(t *testing.T) {
	eachRuntime(t, func(t *testing.T, runtime func(*kubernetes.Config)) {
		p := newProvider(t, runtime)
		sandboxtest.Run(t, func(*testing.T) sandbox.Provider { return p })
	})
}

// The pod is hardened as documented: read the kubelet's view of it. Under
// gVisor the process sees gVisor's kernel, which reports the same
// (runsc applies the pod's seccomp profile itself: oci-seccomp).
func TestClusterPodHardened(t *testing.T) {
	eachRuntime(t, testPodHardened)
}

func testPodHardened(t *testing.T, runtime func(*kubernetes.Config)) {
	p := newProvider(t, runtime)
	sb := create(t, p, sandbox.Spec{})
	// A failed write to the root proves nothing (a non-root user gets
	// "permission denied" on a writable root too, as under gVisor): the
	// root mount's own options (mountinfo's sixth field) must say ro.
	out, err := sandboxtest.Sh(t, sb, `id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; `+
		`while read -r _ _ _ _ mnt opts _; do [ "$mnt" = / ] && echo "root-mount $opts"; done </proc/self/mountinfo; env`)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10001\n", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's process lacks %q:\n%s", want, out)
		}
	}
	if opts, ok := rootMountOptions(out); !ok {
		t.Errorf("the sandbox's /proc/self/mountinfo has no root mount:\n%s", out)
	} else if !slices.Contains(strings.Split(opts, ","), "ro") {
		t.Errorf("the sandbox's root is mounted %q, not read-only:\n%s", opts, out)
	}
	if strings.Contains(out, "RUNNER_SANDBOXD_TOKEN") {
		t.Errorf("the daemon's token reached a sandbox process's environment:\n%s", out)
	}
	pod, err := admin(t).CoreV1().Pods(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)).Get(t.Context(), sb.Info().ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the pod mounts a service account token")
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil || v.Secret != nil {
			t.Errorf("the pod has a %s volume holding credentials", v.Name)
		}
	}
}

// rootMountOptions is the last "root-mount OPTS" line of out: the
// mount on / that the process sees (the last one stacked there).
func rootMountOptions(out string) (string, bool) {
	opts, found := "", false
	for line := range strings.Lines(out) {
		if o, ok := strings.CutPrefix(strings.TrimSpace(line), "root-mount "); ok {
			opts, found = o, true
		}
	}
	return opts, found
}

// A pod deleted out of band while its sandbox is warm (no process
// running) is reported gone, as the runner's warm pool needs to fall back.
// Its container may still answer for a while (the kubelet kills it after
// the API object is gone), so the API server's word is what counts.
func TestClusterPodDeletedWhileWarm(t *testing.T) {
	p := newProvider(t)
	sb := create(t, p, sandbox.Spec{})
	if _, err := sandboxtest.Sh(t, sb, "true"); err != nil {
		t.Fatal(err)
	}
	deletePod(t, sb.Info().ID)
	err := sb.(sandbox.Prober).Probe(t.Context())
	if !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("Probe after the pod was deleted: %v, want ErrGone", err)
	}
	if _, err := p.Open(t.Context(), sb.Info().ID, sandbox.Spec{SessionID: t.Name()}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open of a deleted pod: %v, want not found", err)
	}
}

// A pod deleted while a process runs in it (mid-turn) ends that process
// with an error saying the sandbox is gone, instead of hanging.
func TestClusterPodDeletedMidTurn(t *testing.T) {
	p := newProvider(t)
	sb := create(t, p, sandbox.Spec{})
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 600"}, Env: sandboxtest.Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("started\n"))
	if _, err := io.ReadFull(proc.Stdout(), line); err != nil {
		t.Fatalf("read the process's first line: %v", err)
	}
	deletePod(t, sb.Info().ID)
	done := make(chan error, 1)
	go func() { done <- proc.Wait() }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		proc.Kill()
		t.Fatal("the process of a deleted pod did not end within 3 minutes")
	}
	if err == nil {
		t.Fatal("Wait of a process whose pod was deleted: nil error")
	}
	if !errors.Is(err, sandbox.ErrGone) {
		var exit *sandbox.ExitError
		// The kubelet may kill the process before the stream breaks: an
		// exit by signal is the other honest answer, if Probe agrees.
		if !errors.As(err, &exit) {
			t.Errorf("Wait: %v, want ErrGone or an exit by signal", err)
		}
	}
	if err := sb.(sandbox.Prober).Probe(t.Context()); !errors.Is(err, sandbox.ErrGone) {
		t.Errorf("Probe: %v, want ErrGone", err)
	}
}

// deletePod deletes a sandbox's pod behind the provider's back and waits
// until the API server no longer has it.
func deletePod(t *testing.T, name string) {
	t.Helper()
	pods := admin(t).CoreV1().Pods(envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace))
	zero := int64(0)
	if err := pods.Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := waitDeleted(t.Context(), pods, name); err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
}

// An image that does not exist fails Create at once (not after the
// pending deadline), naming the image, and leaves no pod behind.
func TestClusterImageMissing(t *testing.T) {
	const image = "runner.local/no-such-image:1"
	p := newProvider(t, func(c *kubernetes.Config) { c.Image = image })
	start := time.Now()
	_, err := p.Create(t.Context(), sandbox.Spec{SessionID: t.Name()})
	if err == nil || !strings.Contains(err.Error(), `"`+image+`"`) || !strings.Contains(err.Error(), "cannot be pulled") {
		t.Fatalf("Create with a missing image: %v, want an error naming %q", err, image)
	}
	if took := time.Since(start); took > 2*time.Minute {
		t.Errorf("the pull failure took %s to report", took)
	}
	expectNoPods(t, p)
}

// A pod no node can take stays Pending; after the deadline Create fails
// with the scheduler's own reason, and leaves no pod behind.
func TestClusterPodStuckPending(t *testing.T) {
	p := newProvider(t, func(c *kubernetes.Config) {
		c.NodeSelector = map[string]string{"runner.agenta.ai/test-no-such-node": "true"}
		c.PendingTimeout = 15 * time.Second
	})
	_, err := p.Create(t.Context(), sandbox.Spec{SessionID: t.Name()})
	if err == nil {
		t.Fatal("Create of an unschedulable pod succeeded")
	}
	for _, want := range []string{"Pending after 15s", "not scheduled: Unschedulable", "node(s) didn't match Pod's node affinity/selector"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Create: %v\nwant it to say %q", err, want)
		}
	}
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Create: %v, want class unavailable", err)
	}
	expectNoPods(t, p)
}

func expectNoPods(t *testing.T, p *kubernetes.Provider) {
	t.Helper()
	ids, err := p.ListIDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) > 0 {
		t.Errorf("pods left behind: %v", ids)
	}
}

// The boot check names the verb a Role lacks. The test cluster's user
// "runner-limited" may manage pods but not port-forward to them, nor
// touch NetworkPolicies.
func TestClusterAccessCheck(t *testing.T) {
	if err := newProvider(t).CheckAccess(t.Context()); err != nil {
		t.Fatalf("the admin's access check: %v", err)
	}
	limited, err := clientcmd.BuildConfigFromFlags("", filepath.Join(filepath.Dir(os.Getenv("RUNNER_TEST_KUBE")), "kubeconfig-limited"))
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, func(c *kubernetes.Config) { c.REST = limited })
	err = p.CheckAccess(t.Context())
	if err == nil {
		t.Fatal("the access check of a Role without portforward passed")
	}
	for _, want := range []string{"create pods/portforward", "create networkpolicies.networking.k8s.io", "in namespace " + defaultNamespace} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckAccess: %v\nwant it to name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "create pods,") || strings.Contains(err.Error(), "delete pods") {
		t.Errorf("CheckAccess names a verb the Role grants: %v", err)
	}
}

// The API server restarts under a running sandbox: the sandbox is not
// reported gone, and the next process starts once the API server is back
// (the forwarder dials a new connection).
func TestClusterAPIServerRestart(t *testing.T) {
	kubeSh := kubeScript(t)
	p := newProvider(t)
	sb := create(t, p, sandbox.Spec{})
	if out, err := sandboxtest.Sh(t, sb, "echo before > f && cat f"); err != nil || out != "before\n" {
		t.Fatalf("before the restart: %q, %v", out, err)
	}
	cmd := exec.CommandContext(t.Context(), kubeSh, "restart-apiserver")
	// The cluster RUNNER_TEST_KUBE names (its kubeconfig sits in its state
	// dir), not the default one: another may run beside it.
	cmd.Env = append(os.Environ(), "RUNNER_KUBE_STATE="+filepath.Dir(os.Getenv("RUNNER_TEST_KUBE")))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kube.sh restart-apiserver: %v\n%s", err, out)
	}
	if out, err := sandboxtest.Sh(t, sb, "cat f"); err != nil || out != "before\n" {
		t.Fatalf("after the restart: %q, %v", out, err)
	}
	if err := sb.(sandbox.Prober).Probe(t.Context()); err != nil {
		t.Errorf("Probe after the restart: %v", err)
	}
}

// kubeScript is .ci/kube.sh, which restarts the test cluster's parts; it
// needs root, as the cluster does.
func kubeScript(t *testing.T) string {
	t.Helper()
	cluster(t)
	if os.Geteuid() != 0 {
		t.Skip("restarting the test cluster's API server needs root (.ci/kube.sh)")
	}
	path, err := filepath.Abs("../../../.ci/kube.sh")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// The policy of a sandbox is a NetworkPolicy selecting exactly its pod,
// updated in place when Open brings another network mode.
func TestClusterNetworkPolicy(t *testing.T) {
	p := newProvider(t)
	sb := create(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
	ns := envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)
	pols := admin(t).NetworkingV1().NetworkPolicies(ns)
	pol, err := pols.Get(t.Context(), sb.Info().ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Spec.Egress) != 0 || pol.Spec.PodSelector.MatchLabels["runner.agenta.ai/sandbox"] != sb.Info().ID {
		t.Errorf("network off: policy %+v", pol.Spec)
	}
	sb2, err := p.Open(t.Context(), sb.Info().ID, sandbox.Spec{SessionID: t.Name(), Network: sandbox.Network{Mode: "allowlist", Allow: []string{"93.184.215.14"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Its own connection to the pod; the pod goes with the first Destroy.
	t.Cleanup(func() { _ = sb2.Destroy(context.Background()) })
	if _, err := sandboxtest.Sh(t, sb2, "true"); err != nil {
		t.Fatal(err)
	}
	pol, err = pols.Get(t.Context(), sb.Info().ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cidrs []string
	for _, r := range pol.Spec.Egress {
		for _, to := range r.To {
			if to.IPBlock != nil {
				cidrs = append(cidrs, to.IPBlock.CIDR)
			}
		}
	}
	if !strings.Contains(strings.Join(cidrs, " "), "93.184.215.14/32") {
		t.Errorf("after Open with an allowlist: egress to %v", cidrs)
	}
}

// parking parks on the test cluster's local volumes (.ci/kube.sh makes
// them, 1Gi each).
func parking(c *kubernetes.Config) {
	c.StorageClass = "runner-local"
	c.VolumeSize = resource.MustParse("1Gi")
}

func parkingProvider(t *testing.T) *kubernetes.Provider { return newProvider(t, parking) }

// The warm ladder's parked and resumed rungs: Pause deletes the pod and
// keeps the claim; Open makes a new pod with the workspace and $HOME as
// they were; Destroy deletes the claim too.
func TestClusterParkResume(t *testing.T) {
	eachRuntime(t, testParkResume)
}

func testParkResume(t *testing.T, runtime func(*kubernetes.Config)) {
	p := newProvider(t, parking, runtime)
	sb := create(t, p, sandbox.Spec{})
	id := sb.Info().ID
	if _, err := sandboxtest.Sh(t, sb, `echo kept > w && echo home > "$HOME/h" && mkdir -p d && echo deep > d/f`); err != nil {
		t.Fatal(err)
	}
	pz, ok := sb.(sandbox.Pauser)
	if !ok {
		t.Fatalf("a parking provider's sandbox %T is no Pauser", sb)
	}
	if err := pz.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	ns := envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)
	c := admin(t)
	if _, err := c.CoreV1().Pods(ns).Get(t.Context(), id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the parked sandbox's pod: %v, want not found", err)
	}
	if ids, err := p.ListIDs(t.Context()); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("ListIDs of a parked sandbox: %v, %v; want [%s]", ids, err, id)
	}
	resumed, err := p.Open(t.Context(), id, sandbox.Spec{SessionID: t.Name()})
	if err != nil {
		t.Fatalf("Open of the parked sandbox: %v", err)
	}
	if out, err := sandboxtest.Sh(t, resumed, `cat w "$HOME/h" d/f`); err != nil || out != "kept\nhome\ndeep\n" {
		t.Errorf("after resume: %q, %v; want the files kept", out, err)
	}
	if err := resumed.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if claim, err := c.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), id, metav1.GetOptions{}); err == nil && claim.DeletionTimestamp == nil {
		t.Errorf("Destroy left the claim %s", id)
	}
	if _, err := p.Open(t.Context(), id, sandbox.Spec{SessionID: t.Name()}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open after Destroy: %v, want not found", err)
	}
}

// The gone rung: a parked sandbox whose claim was deleted out of band is
// not found, which makes the runner start afresh in the same turn.
func TestClusterParkedClaimDeleted(t *testing.T) {
	p := parkingProvider(t)
	sb := create(t, p, sandbox.Spec{})
	id := sb.Info().ID
	if err := sb.(sandbox.Pauser).Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	ns := envOr("RUNNER_TEST_KUBE_NAMESPACE", defaultNamespace)
	if err := admin(t).CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Open(t.Context(), id, sandbox.Spec{SessionID: t.Name()})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "volume claim") {
		t.Fatalf("Open of a parked sandbox without its claim: %v, want not found naming the claim", err)
	}
}

// The test cluster's CNI is the plain bridge plugin, and its policy
// controller (kube-router) serves no API group: the heuristic finds no
// enforcing CNI (where the probe, TestClusterPolicyProbe, finds the
// policy enforced).
func TestClusterPolicyEnforcementDetected(t *testing.T) {
	p := newProvider(t)
	e, err := p.DetectPolicyEnforcement(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(e.CNIs) != 0 || !strings.Contains(e.String(), "no NetworkPolicy-enforcing CNI detected") {
		t.Errorf("on the bridge CNI: %v, %q", e.CNIs, e)
	}
	if d := p.Describe()["network_policy"]; d != e.String() {
		t.Errorf("Describe's network_policy %q, want %q", d, e)
	}
}
