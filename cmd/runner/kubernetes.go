package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/sandbox/kubernetes"
)

// newKubernetes builds the Kubernetes provider from its settings and runs
// its boot check: a Role that lacks a verb the provider uses stops the
// runner here, naming the verb, instead of failing turns later.
func newKubernetes(cfg config.Config, replica string, log *slog.Logger) (*kubernetes.Provider, error) {
	k := cfg.Kubernetes
	var errs []error
	var rc *rest.Config
	var err error
	if k.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("AGENTA_RUNNER_KUBERNETES_KUBECONFIG (empty: in-cluster): %w", err))
	}
	pc := kubernetes.Config{
		REST: rc, Namespace: k.Namespace, Image: k.Image, RunnerPath: k.RunnerPath, HarnessPrefix: k.HarnessPrefix, Version: version,
		Replica: replica, RuntimeClassName: k.RuntimeClass, PendingTimeout: k.PendingTimeout,
	}
	decode := func(setting, v string, into any) {
		if v == "" {
			return
		}
		d := json.NewDecoder(bytes.NewReader([]byte(v)))
		d.DisallowUnknownFields()
		if err := d.Decode(into); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", setting, err))
		}
	}
	decode("AGENTA_RUNNER_KUBERNETES_RESOURCES", k.Resources, &pc.Resources)
	decode("AGENTA_RUNNER_KUBERNETES_NODE_SELECTOR", k.NodeSelector, &pc.NodeSelector)
	decode("AGENTA_RUNNER_KUBERNETES_TOLERATIONS", k.Tolerations, &pc.Tolerations)
	if k.Affinity != "" {
		pc.Affinity = &corev1.Affinity{}
		decode("AGENTA_RUNNER_KUBERNETES_AFFINITY", k.Affinity, pc.Affinity)
	}
	if k.StorageClass != "" {
		pc.StorageClass = k.StorageClass
		q, err := resource.ParseQuantity(k.VolumeSize)
		if err != nil {
			errs = append(errs, fmt.Errorf("AGENTA_RUNNER_KUBERNETES_VOLUME_SIZE=%q: %w", k.VolumeSize, err))
		}
		pc.VolumeSize = q
	}
	for _, c := range k.ClusterCIDRs {
		pfx, err := netip.ParsePrefix(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("AGENTA_RUNNER_KUBERNETES_CLUSTER_CIDRS: %w", err))
			continue
		}
		pc.ClusterCIDRs = append(pc.ClusterCIDRs, pfx.Masked())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p, err := kubernetes.New(pc, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.CheckAccess(ctx); err != nil {
		return nil, err
	}
	log.Info("kubernetes sandboxes", "namespace", k.Namespace, "image", k.Image, "harness_prefix", p.HarnessPrefix(), "runtime_class", k.RuntimeClass, "storage_class", k.StorageClass)
	// The API accepts a NetworkPolicy whether or not anything enforces it:
	// the admin must know when nothing does. The probe (a pod, seconds)
	// runs in the background so as not to hold up readiness; the
	// heuristic is its fallback (enforce.go, probe.go).
	if k.PolicyProbe {
		p.StartPolicyProbe(3 * time.Minute)
	} else {
		p.ReportPolicyEnforcement(ctx)
	}
	return p, nil
}
