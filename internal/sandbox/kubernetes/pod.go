package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// The pod's writable places; everything else is the read-only image.
const (
	container   = "sandbox"
	dataDir     = "/sandbox"
	workdir     = dataDir + "/workspace"
	homeDir     = dataDir + "/home"
	sandboxUser = 10001
)

// meta is the name, labels and annotations of sandbox name's pod and
// claim: the reaper finds them by replica, an operator by session.
func (p *Provider) meta(name string, spec sandbox.Spec) metav1.ObjectMeta {
	lbl := map[string]string{
		labelManaged: managedBy,
		labelReplica: p.cfg.Replica,
		labelSandbox: name,
		labelSession: hashLabel(spec.SessionID),
		labelProject: hashLabel(spec.ProjectID),
	}
	annot := map[string]string{annotSession: spec.SessionID, annotProject: spec.ProjectID}
	for k, v := range spec.Labels {
		annot["runner.agenta.ai/label-"+k] = v
	}
	return metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: lbl, Annotations: annot}
}

// podFor is the pod of sandbox name for spec.
func (p *Provider) podFor(name string, spec sandbox.Spec) *corev1.Pod {
	yes, no := true, false
	uid := int64(sandboxUser)
	emptyDir := func(n string) corev1.Volume {
		return corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	volumes := []corev1.Volume{emptyDir("workspace"), emptyDir("agent"), emptyDir("home"), emptyDir("tmp")}
	mounts := []corev1.VolumeMount{
		{Name: "workspace", MountPath: workdir},
		{Name: "agent", MountPath: workdir + "-agent"},
		{Name: "home", MountPath: homeDir},
		{Name: "tmp", MountPath: "/tmp"},
	}
	if p.parking() {
		// One claim holds the three places that must outlive the pod, as
		// subdirectories; /tmp stays the pod's own.
		volumes = []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}},
			emptyDir("tmp"),
		}
		mounts = []corev1.VolumeMount{
			{Name: "data", MountPath: workdir, SubPath: "workspace"},
			{Name: "data", MountPath: workdir + "-agent", SubPath: "agent"},
			{Name: "data", MountPath: homeDir, SubPath: "home"},
			{Name: "tmp", MountPath: "/tmp"},
		}
	}
	var runtimeClass *string
	if p.cfg.RuntimeClassName != "" {
		runtimeClass = &p.cfg.RuntimeClassName
	}
	return &corev1.Pod{
		ObjectMeta: p.meta(name, spec),
		Spec: corev1.PodSpec{
			RuntimeClassName:             runtimeClass,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			// No service addresses in the environment either.
			EnableServiceLinks: &no,
			NodeSelector:       p.cfg.NodeSelector,
			Tolerations:        p.cfg.Tolerations,
			Affinity:           p.cfg.Affinity,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &uid,
				FSGroup:        &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: volumes,
			Containers: []corev1.Container{{
				Name:            container,
				Image:           p.cfg.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{p.cfg.RunnerPath, "sandboxd"},
				Args: []string{
					"--listen", fmt.Sprintf("127.0.0.1:%d", daemonPort),
					"--state-dir", "/tmp/.runner-sandboxd",
					"--workdir", workdir,
					"--runner-version", p.cfg.Version,
				},
				WorkingDir: workdir,
				Env: []corev1.EnvVar{
					{Name: "HOME", Value: homeDir},
					{Name: sandboxd.TokenEnv, Value: p.token(name)},
				},
				Resources: p.cfg.Resources,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Privileged:               &no,
					ReadOnlyRootFilesystem:   &yes,
					RunAsNonRoot:             &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: mounts,
			}},
		},
	}
}

// pullFailures are container waiting reasons that no wait cures.
var pullFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
}

// startFailures are waiting reasons of a container that cannot start.
var startFailures = map[string]bool{
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

// waitRunning watches pod until its container runs. It fails at once
// when the image cannot be pulled or the container cannot start, and
// after Config.PendingTimeout with what the scheduler or kubelet said.
func (p *Provider) waitRunning(ctx context.Context, pod *corev1.Pod) error {
	if running(pod) {
		return nil
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PendingTimeout)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", pod.Name).String()
	lw := p.podsListWatch(func(o *metav1.ListOptions) { o.FieldSelector = sel })
	last := pod
	var failed error
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			failed = goneErr(pod.Name, "was deleted while starting")
			return false, failed
		}
		cur, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		last = cur
		if err := startError(cur, p.cfg.Image); err != nil {
			failed = err
			return false, err
		}
		return running(cur), nil
	})
	switch {
	case failed != nil:
		return failed
	case err == nil:
		return nil
	case parent.Err() != nil:
		return parent.Err() // the caller gave up
	case ctx.Err() != nil:
		return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("kubernetes sandbox %s: still %s after %s: %s",
			pod.Name, podState(last), p.cfg.PendingTimeout, pendingReason(last)))
	}
	return p.apiErr(fmt.Errorf("watch pod %s/%s: %w", p.cfg.Namespace, pod.Name, err))
}

func running(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil
		}
	}
	return false
}

// startError says why pod will never run, if it will not.
func startError(pod *corev1.Pod, image string) error {
	if pod.DeletionTimestamp != nil {
		return goneErr(pod.Name, "is being deleted")
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("kubernetes sandbox %s: the pod ended (%s) before it ran: %s", pod.Name, pod.Status.Phase, pendingReason(pod)))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			if pullFailures[w.Reason] {
				return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("kubernetes sandbox %s: the sandbox image %q cannot be pulled (%s: %s); check AGENTA_RUNNER_KUBERNETES_IMAGE and the node's registry access",
					pod.Name, image, w.Reason, w.Message))
			}
			if startFailures[w.Reason] {
				return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("kubernetes sandbox %s: the container cannot start (%s: %s)", pod.Name, w.Reason, w.Message))
			}
		}
		if t := cs.State.Terminated; t != nil {
			return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("kubernetes sandbox %s: the daemon exited with code %d (%s: %s)", pod.Name, t.ExitCode, t.Reason, t.Message))
		}
	}
	return nil
}

// pendingReason is what keeps pod from running: the scheduler's
// condition message, else the container's waiting reason.
func pendingReason(pod *corev1.Pod) string {
	var parts []string
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("not scheduled: %s: %s", c.Reason, c.Message))
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message))
		}
	}
	if len(parts) == 0 {
		return "no reason reported yet (no scheduler running?)"
	}
	return strings.Join(parts, "; ")
}

func podState(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return "being deleted"
	}
	return string(pod.Status.Phase)
}

// gone is the daemon client's Gone check for pod name. An API server that
// does not answer proves nothing, so it is not "gone".
func (p *Provider) gone(name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return goneErr(name, "was deleted")
		case err != nil:
			return nil
		case pod.DeletionTimestamp != nil, pod.Status.Phase == corev1.PodFailed, pod.Status.Phase == corev1.PodSucceeded:
			return goneErr(name, "is "+podState(pod))
		}
		return nil
	}
}

func goneErr(name, what string) error {
	return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("kubernetes sandbox %s %s: %w", name, what, sandbox.ErrGone))
}
