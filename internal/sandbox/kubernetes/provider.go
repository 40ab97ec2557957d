package kubernetes

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd"
	"github.com/agentrunner/runner/internal/sandboxd/client"
)

// Config configures the provider.
type Config struct {
	// REST is how the API server is reached (a kubeconfig's, or the
	// runner pod's in-cluster config).
	REST *rest.Config // required
	// Namespace is where sandbox pods and their policies live.
	Namespace string // required
	// Image is the sandbox image: it must carry the runner binary at
	// RunnerPath (the project's image does) and the harnesses.
	Image string // required
	// RunnerPath is the runner binary inside the image (default
	// /usr/local/bin/runner); the pod runs `<RunnerPath> sandboxd`.
	RunnerPath string
	// HarnessPrefix is where the image installs the harnesses, one npm
	// prefix per harness (<HarnessPrefix>/<dir>/node_modules/.bin/<bin>);
	// default /opt/runner/harnesses, where the project's Dockerfile
	// `harnesses` target puts them. The pod never sees the runner host's
	// harness dir, so this is the only place a harness can come from.
	HarnessPrefix string
	// Version is the runner version the daemon reports.
	Version string // required
	// Replica labels the pods with the runner replica that made them, for
	// the reaper: as it is when it is a valid label value, else hashed.
	Replica string
	// RuntimeClassName isolates the pods (gvisor, kata …); empty uses the
	// cluster's default runtime.
	RuntimeClassName string
	// Resources are the sandbox container's requests and limits; an
	// ephemeral-storage limit bounds the writable volumes too.
	Resources corev1.ResourceRequirements
	// NodeSelector, Tolerations and Affinity place the pods.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Affinity     *corev1.Affinity
	// ClusterCIDRs are the cluster's pod and service ranges, refused
	// under network "on" along with the ranges internal/sandbox/egress
	// refuses.
	ClusterCIDRs []netip.Prefix
	// PendingTimeout bounds how long a pod may stay Pending (no capacity,
	// quota, a slow pull); default 2 min.
	PendingTimeout time.Duration
	// TokenKey keys the per-pod daemon tokens (HMAC of the pod name), so
	// a restarted runner can reach a daemon it started; default random.
	TokenKey []byte
	// StorageClass, when set, turns parking on: each sandbox's workspace,
	// agent folder and home live on a PersistentVolumeClaim of this class
	// (named as the sandbox), so Pause can delete the pod and keep them,
	// and Open brings them back in a new pod. Empty: emptyDir volumes,
	// and an idle pod is deleted with its files.
	StorageClass string
	// VolumeSize is the claim's requested size (default 4Gi).
	VolumeSize resource.Quantity
}

// Provider creates sandboxes as pods.
type Provider struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	pods   podWatch
	// enforcement is what DetectPolicyEnforcement found (nil: not asked).
	enforcement atomic.Pointer[PolicyEnforcement]
	// The background NetworkPolicy probe (StartPolicyProbe), which Close
	// stops and waits for.
	probeMu   sync.Mutex
	probeStop context.CancelFunc
	probeDone chan struct{}
}

var (
	_ sandbox.Provider     = (*Provider)(nil)
	_ sandbox.Opener       = (*Provider)(nil)
	_ sandbox.Remover      = (*Provider)(nil)
	_ sandbox.Lister       = (*Provider)(nil)
	_ sandbox.Describer    = (*Provider)(nil)
	_ sandbox.HarnessImage = (*Provider)(nil)
)

// Labels put on every pod and policy.
const (
	labelManaged = "app.kubernetes.io/managed-by"
	managedBy    = "agenta-runner"
	labelReplica = "runner.agenta.ai/replica"
	labelSandbox = "runner.agenta.ai/sandbox"
	// Session and project ids are free-form: their labels hold a hash
	// (label values are 63 characters of a small alphabet); the ids
	// themselves are annotations.
	labelSession = "runner.agenta.ai/session"
	labelProject = "runner.agenta.ai/project"
	annotSession = "runner.agenta.ai/session-id"
	annotProject = "runner.agenta.ai/project-id"
)

// daemonPort is where sandboxd listens, on the pod's loopback only.
const daemonPort = sandboxd.DefaultPort

var labelValue = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]{0,61}[A-Za-z0-9]|[A-Za-z0-9]?)$`)

// New returns a provider for cfg. It checks the configuration and makes
// no API call; CheckAccess is the boot check.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.REST == nil {
		errs = append(errs, errdefs.Invalidf("kubernetes: no API server configuration (a kubeconfig, or in-cluster)"))
	}
	if cfg.Namespace == "" {
		errs = append(errs, errdefs.Invalidf("kubernetes: the sandbox namespace is required"))
	}
	if cfg.Image == "" {
		errs = append(errs, errdefs.Invalidf("kubernetes: the sandbox image is required"))
	}
	if cfg.Version == "" {
		errs = append(errs, errdefs.Invalidf("kubernetes: the runner version is required"))
	}
	// A relative prefix would resolve against the harness's working
	// directory, the tenant's workspace, where the tenant could plant a
	// binary of its own.
	if cfg.HarnessPrefix != "" && !path.IsAbs(cfg.HarnessPrefix) {
		errs = append(errs, errdefs.Invalidf("kubernetes: the harness prefix %q in the image must be an absolute path", cfg.HarnessPrefix))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if !labelValue.MatchString(cfg.Replica) {
		cfg.Replica = hashLabel(cfg.Replica)
	}
	if cfg.RunnerPath == "" {
		cfg.RunnerPath = "/usr/local/bin/runner"
	}
	if cfg.HarnessPrefix == "" {
		cfg.HarnessPrefix = DefaultHarnessPrefix
	}
	if cfg.PendingTimeout <= 0 {
		cfg.PendingTimeout = 2 * time.Minute
	}
	if cfg.StorageClass != "" && cfg.VolumeSize.IsZero() {
		cfg.VolumeSize = resource.MustParse("4Gi")
	}
	if len(cfg.TokenKey) == 0 {
		cfg.TokenKey = make([]byte, 32)
		_, _ = rand.Read(cfg.TokenKey)
	}
	client, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, errdefs.Invalidf("kubernetes: %v", err)
	}
	pr := &Provider{cfg: cfg, client: client, log: logger}
	pr.pods.p = pr
	return pr, nil
}

// DefaultHarnessPrefix is where the project's image (the Dockerfile's
// `harnesses` target) installs the harnesses.
const DefaultHarnessPrefix = "/opt/runner/harnesses"

// HarnessPrefix is where the sandbox image carries the harnesses.
func (p *Provider) HarnessPrefix() string { return p.cfg.HarnessPrefix }

// Name is "kubernetes".
func (p *Provider) Name() string { return "kubernetes" }

// Describe reports what the provider enforces.
func (p *Provider) Describe() map[string]any {
	d := map[string]any{
		"isolation": "kubernetes",
		"network":   []string{"on", "off", "allowlist"},
		"pause":     p.parking(),
		"namespace": p.cfg.Namespace,
		"image":     p.cfg.Image,
	}
	if p.cfg.RuntimeClassName != "" {
		d["runtime_class"] = p.cfg.RuntimeClassName
	}
	if e := p.enforcement.Load(); e != nil {
		d["network_policy"] = e.String()
	}
	return d
}

// parking says whether sandboxes keep their files on a claim across pods.
func (p *Provider) parking() bool { return p.cfg.StorageClass != "" }

// token is the daemon token of pod name. Deriving it keeps no state a
// runner restart could lose.
func (p *Provider) token(name string) string {
	m := hmac.New(sha256.New, p.cfg.TokenKey)
	m.Write([]byte("runner-sandboxd:" + name))
	return hex.EncodeToString(m.Sum(nil))
}

func checkSpec(spec sandbox.Spec) error {
	if len(spec.Binds) > 0 {
		return errdefs.Unprocessablef("kubernetes sandboxes cannot see host paths (binds %q); the runner binary is in the sandbox image", spec.Binds[0].Path)
	}
	if spec.Workdir != "" {
		return errdefs.Unprocessablef("kubernetes sandboxes cannot use a host directory (%q) as their workspace", spec.Workdir)
	}
	if spec.ReadOnly {
		return errdefs.Unprocessablef("kubernetes sandboxes cannot make the workspace read-only")
	}
	if spec.StateKey != "" {
		return errdefs.Unprocessablef("kubernetes sandboxes keep no state across pods yet (a state key was asked for); use the durable workspace store")
	}
	return nil
}

// Create makes a pod for spec and returns once its daemon answers.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	pol, err := policyFor(spec.Network, p.cfg.ClusterCIDRs)
	if err != nil {
		return nil, err
	}
	name := "runner-sbx-" + randomHex(6)
	log := p.log.With(logkey.Sandbox, name, logkey.Session, spec.SessionID)
	start := time.Now()
	// The policy comes first: the pod never runs a moment without it.
	if err := p.applyPolicy(ctx, name, pol); err != nil {
		return nil, err
	}
	if p.parking() {
		if err := p.createClaim(ctx, name, spec); err != nil {
			p.cleanup(ctx, name, log)
			return nil, err
		}
	}
	pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Create(ctx, p.podFor(name, spec), metav1.CreateOptions{})
	if err != nil {
		p.cleanup(ctx, name, log)
		return nil, p.apiErr(fmt.Errorf("create pod %s/%s: %w", p.cfg.Namespace, name, err))
	}
	sb, err := p.attach(ctx, pod, log)
	if err != nil {
		p.cleanup(ctx, name, log)
		return nil, err
	}
	log.Info("sandbox created", logkey.Duration, time.Since(start).Milliseconds())
	return asSandbox(sb, nil)
}

// cleanup deletes what a failed Create made.
func (p *Provider) cleanup(ctx context.Context, name string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := p.remove(ctx, name); err != nil {
		log.Warn("removing a pod that failed to start", logkey.Error, err)
	}
}

// Open reattaches to the pod named id, for a runner that restarted. A pod
// that is gone or no longer running is errdefs.ErrNotFound: a pod's
// workspace does not outlive it.
func (p *Provider) Open(ctx context.Context, id string, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	pol, err := policyFor(spec.Network, p.cfg.ClusterCIDRs)
	if err != nil {
		return nil, err
	}
	pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && p.parking():
		return p.resume(ctx, id, spec, pol)
	case apierrors.IsNotFound(err):
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("kubernetes sandbox %s: the pod is gone", id))
	case err != nil:
		return nil, p.apiErr(fmt.Errorf("get pod %s/%s: %w", p.cfg.Namespace, id, err))
	case pod.Labels[labelManaged] != managedBy || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning:
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("kubernetes sandbox %s: the pod is %s", id, podState(pod)))
	}
	// The request's policy may differ from the one the pod was made with.
	if err := p.applyPolicy(ctx, id, pol); err != nil {
		return nil, err
	}
	return asSandbox(p.attach(ctx, pod, p.log.With(logkey.Sandbox, id, logkey.Session, spec.SessionID)))
}

// attach waits for pod to run and its daemon to answer.
func (p *Provider) attach(ctx context.Context, pod *corev1.Pod, log *slog.Logger) (*Sandbox, error) {
	if err := p.waitRunning(ctx, pod); err != nil {
		return nil, err
	}
	name := pod.Name
	fw := &forwarder{cfg: p.cfg.REST, client: p.client, namespace: p.cfg.Namespace, pod: name, port: daemonPort}
	hc := &http.Client{Transport: &http.Transport{DialContext: fw.DialContext, MaxIdleConnsPerHost: 16}}
	newClient := func(attempts int) *client.Client {
		return client.New(client.Config{
			BaseURL: "http://sandboxd", Token: p.token(name), HTTPClient: hc, Attempts: attempts,
			Gone: p.gone(name),
		})
	}
	// The container runs; the daemon may take a moment to listen.
	h, err := newClient(20).Health(ctx)
	if err != nil {
		fw.Close()
		return nil, fmt.Errorf("kubernetes sandbox %s: daemon health: %w%s", name, err, p.runtimeHint(err))
	}
	s := &Sandbox{
		parked: p.parking(),
		Remote: client.Remote{
			Daemon: newClient(0),
			Meta: sandbox.Info{
				ID: name, Provider: "kubernetes", Isolation: "kubernetes",
				Workdir: h.Workdir, Home: h.Home,
			},
			Socket: h.Socket,
			Runner: p.cfg.RunnerPath,
		},
		p:    p,
		id:   name,
		uid:  pod.UID,
		fw:   fw,
		http: hc,
		log:  log,
	}
	s.Destroyed = s.destroyed
	p.pods.add(pod.UID, s)
	return s, nil
}

// asSandbox returns sb as the sandbox.Sandbox it is: a Pauser when parking is
// on, so the runner parks it instead of destroying it.
func asSandbox(sb *Sandbox, err error) (sandbox.Sandbox, error) {
	if err != nil {
		return nil, err
	}
	if sb.parked {
		return &Parkable{sb}, nil
	}
	return sb, nil
}

// apiErr classes an API error: a refusal by RBAC is the operator's to
// fix, anything else is the cluster being unavailable.
func (p *Provider) apiErr(err error) error {
	if apierrors.IsForbidden(err) {
		err = fmt.Errorf("%w (the runner's Role lacks this verb; see docs/kubernetes.md)", err)
	}
	return errdefs.With(errdefs.ErrUnavailable, err)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// hashLabel is a label-safe stand-in for a free-form id.
func hashLabel(s string) string {
	if s == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:10])
}

// quantity parses a resource quantity from a setting, naming the setting.
func quantity(setting, v string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return q, errdefs.Invalidf("%s=%q: %v", setting, v, err)
	}
	return q, nil
}
