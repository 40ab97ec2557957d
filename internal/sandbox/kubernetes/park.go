package kubernetes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

// Parking (Config.StorageClass set): a sandbox is a claim and, while it
// is warm, a pod of the same name mounting it. Pause deletes the pod and
// keeps the claim (and the policy); Open of a sandbox without a pod makes
// a new one on the claim, so the workspace, the agent folder and $HOME
// (where harnesses keep their transcripts) come back as they were. A
// claim deleted out of band makes Open report errdefs.ErrNotFound, and
// the runner falls back to a fresh sandbox in the same turn.

// Parkable is a sandbox whose files outlive its pod: the runner parks it
// (Pause) instead of destroying it.
type Parkable struct{ *Sandbox }

var (
	_ sandbox.Pauser      = (*Parkable)(nil)
	_ sandbox.Channeler   = (*Parkable)(nil)
	_ sandbox.Prober      = (*Parkable)(nil)
	_ sandbox.FileTree    = (*Parkable)(nil)
	_ sandbox.TreeWatcher = (*Parkable)(nil)
)

// Pause deletes the pod and keeps the claim and the policy. It returns
// once the pod is gone, so a resume can reuse its name at once.
func (s *Parkable) Pause(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	s.p.pods.remove(s.uid, s.Sandbox) // its own deletion is no loss to report
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := s.p.deletePod(ctx, s.id); err != nil {
		return fmt.Errorf("kubernetes sandbox %s: park: %w", s.id, err)
	}
	s.gone = true
	s.http.CloseIdleConnections()
	s.fw.Close()
	s.log.Info("sandbox parked")
	return nil
}

// createClaim makes sandbox name's claim.
func (p *Provider) createClaim(ctx context.Context, name string, spec sandbox.Spec) error {
	class := p.cfg.StorageClass
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: p.meta(name, spec),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: p.cfg.VolumeSize},
			},
		},
	}
	if _, err := p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return p.apiErr(fmt.Errorf("create persistent volume claim %s/%s (storage class %q): %w", p.cfg.Namespace, name, class, err))
	}
	return nil
}

// resume makes a new pod on parked sandbox id's claim.
func (p *Provider) resume(ctx context.Context, id string, spec sandbox.Spec, pol policy) (sandbox.Sandbox, error) {
	claim, err := p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("kubernetes sandbox %s: the pod and its volume claim are gone", id))
	case err != nil:
		return nil, p.apiErr(fmt.Errorf("get persistent volume claim %s/%s: %w", p.cfg.Namespace, id, err))
	case claim.Labels[labelManaged] != managedBy || claim.DeletionTimestamp != nil || claim.Status.Phase == corev1.ClaimLost:
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("kubernetes sandbox %s: its volume claim is %s", id, claimState(claim)))
	}
	log := p.log.With(logkey.Sandbox, id, logkey.Session, spec.SessionID)
	start := time.Now()
	if err := p.applyPolicy(ctx, id, pol); err != nil {
		return nil, err
	}
	pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Create(ctx, p.podFor(id, spec), metav1.CreateOptions{})
	if err != nil {
		return nil, p.apiErr(fmt.Errorf("create pod %s/%s: %w", p.cfg.Namespace, id, err))
	}
	sb, err := p.attach(ctx, pod, log)
	if err != nil {
		// The files stay on the claim: a later Open may succeed where this
		// pod did not. Only the pod goes.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := p.deletePod(dctx, id); derr != nil {
			log.Warn("removing a resumed pod that failed to start", logkey.Error, derr)
		}
		return nil, err
	}
	log.Info("sandbox resumed", logkey.Duration, time.Since(start).Milliseconds())
	return asSandbox(sb, nil)
}

func claimState(c *corev1.PersistentVolumeClaim) string {
	if c.DeletionTimestamp != nil {
		return "being deleted"
	}
	if c.Labels[labelManaged] != managedBy {
		return "not the runner's"
	}
	return string(c.Status.Phase)
}

// deletePod deletes pod name now and waits until the API server no longer
// has it.
func (p *Provider) deletePod(ctx context.Context, name string) error {
	pods := p.client.CoreV1().Pods(p.cfg.Namespace)
	zero := int64(0)
	err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return p.apiErr(fmt.Errorf("delete pod %s/%s: %w", p.cfg.Namespace, name, err))
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return p.apiErr(fmt.Errorf("watch pod %s/%s: %w", p.cfg.Namespace, name, err))
	}
	defer w.Stop()
	// The watch started after the delete: the pod may be gone already.
	if _, err := pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				if _, err := pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
					return nil
				}
				return p.apiErr(fmt.Errorf("pod %s/%s: the watch ended before the pod was deleted", p.cfg.Namespace, name))
			}
			if ev.Type == "DELETED" {
				return nil
			}
		case <-ctx.Done():
			return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("pod %s/%s: not deleted in time: %w", p.cfg.Namespace, name, ctx.Err()))
		}
	}
}
