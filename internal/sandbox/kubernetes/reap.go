package kubernetes

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// What the runner's reaper uses: the sandboxes a replica made, and their
// deletion by id.

// ListIDs returns the sandboxes this replica made that are not being
// deleted: its pods, and with parking its claims (a parked sandbox has
// no pod).
func (p *Provider) ListIDs(ctx context.Context) ([]string, error) {
	sel := labels.Set{labelManaged: managedBy, labelReplica: p.cfg.Replica}.String()
	list, err := p.client.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, p.apiErr(fmt.Errorf("list pods in %s: %w", p.cfg.Namespace, err))
	}
	var ids []string
	seen := map[string]bool{}
	for _, pod := range list.Items {
		if pod.DeletionTimestamp == nil {
			ids = append(ids, pod.Name)
			seen[pod.Name] = true
		}
	}
	if !p.parking() {
		return ids, nil
	}
	claims, err := p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, p.apiErr(fmt.Errorf("list persistent volume claims in %s: %w", p.cfg.Namespace, err))
	}
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil && !seen[c.Name] {
			ids = append(ids, c.Name)
		}
	}
	return ids, nil
}

// Remove deletes the pod named id and its policy; gone already is done.
func (p *Provider) Remove(ctx context.Context, id string) error {
	return p.remove(ctx, id)
}

func (p *Provider) remove(ctx context.Context, name string) error {
	zero := int64(0)
	err := p.client.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return p.apiErr(fmt.Errorf("delete pod %s/%s: %w", p.cfg.Namespace, name, err))
	}
	err = p.client.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return p.apiErr(fmt.Errorf("delete network policy %s/%s: %w", p.cfg.Namespace, name, err))
	}
	if p.parking() {
		err = p.client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return p.apiErr(fmt.Errorf("delete persistent volume claim %s/%s: %w", p.cfg.Namespace, name, err))
		}
	}
	return nil
}
