package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server accepts a NetworkPolicy whether or not anything enforces
// it: only the CNI does, and the API does not say which CNI runs. What
// can be told without privileges is whether the API groups of a CNI that
// enforces NetworkPolicy are served (discovery is open to every
// authenticated user): their presence says the CNI is installed, their
// absence that none of these is. Neither is proof (a CNI may be installed
// with its policy engine off; kube-router, Weave Net and some managed
// dataplanes enforce policy with no API group of their own), which is why
// the result is reported, loudly when nothing is found, and never refuses
// a turn.

// enforcers are API groups of CNIs that enforce NetworkPolicy.
var enforcers = []struct{ group, cni string }{
	{"crd.projectcalico.org", "Calico"},
	{"projectcalico.org", "Calico"},
	{"cilium.io", "Cilium"},
	{"crd.antrea.io", "Antrea"},
	{"k8s.ovn.org", "OVN-Kubernetes"},
	{"kubeovn.io", "Kube-OVN"},
}

// PolicyEnforcement is what the boot check found about NetworkPolicy
// enforcement on the cluster: the probe's finding when it ran, else the
// heuristic's.
type PolicyEnforcement struct {
	// Probed says the probe pod ran to a finding (Enforced, Target);
	// false: CNIs and Groups are the heuristic's.
	Probed bool
	// Enforced: under a deny-all-egress policy the probe pod could not
	// dial Target, which it dialled with all egress allowed.
	Enforced bool
	// Target is the address the probe dialled (its node's kubelet).
	Target string
	// CNIs are the NetworkPolicy-enforcing CNIs whose API groups the
	// cluster serves; none means none of the known ones was found.
	CNIs []string
	// Groups are those API groups.
	Groups []string
}

// String says what was found, for the boot log and /health.
func (e PolicyEnforcement) String() string {
	switch {
	case e.Probed && e.Enforced:
		return "NetworkPolicy enforced (probed: a pod under a deny-all-egress policy could not reach " + e.Target + ", which it reached with egress allowed)"
	case e.Probed:
		return "NetworkPolicy is not enforced by this cluster's CNI: sandbox network modes off/on/allowlist are advisory (a probe pod under a deny-all-egress policy still reached " +
			e.Target + "); install a CNI or policy controller that enforces NetworkPolicy (Calico, Cilium, kube-router, ...)"
	}
	if len(e.CNIs) == 0 {
		return "no NetworkPolicy-enforcing CNI detected (none of the API groups of " + knownCNIs() +
			" is served): network off and allowlist may be advisory on this cluster"
	}
	return "NetworkPolicy enforced by " + strings.Join(e.CNIs, ", ") + " (API groups " + strings.Join(e.Groups, ", ") + " served)"
}

func knownCNIs() string {
	var names []string
	for _, e := range enforcers {
		if !slices.Contains(names, e.cni) {
			names = append(names, e.cni)
		}
	}
	return strings.Join(names, ", ")
}

// DetectPolicyEnforcement asks the API server's discovery which API groups
// it serves and reports the NetworkPolicy-enforcing CNIs among them.
func (p *Provider) DetectPolicyEnforcement(ctx context.Context) (PolicyEnforcement, error) {
	var e PolicyEnforcement
	// /apis itself rather than the discovery client, which takes no
	// context: a stalled API server must not stall the boot.
	var groups metav1.APIGroupList
	if err := p.client.Discovery().RESTClient().Get().AbsPath("/apis").Do(ctx).Into(&groups); err != nil {
		return e, p.apiErr(fmt.Errorf("kubernetes: discovery of the served API groups: %w", err))
	}
	e = enforcementOf(groups)
	p.enforcement.Store(&e)
	return e, nil
}

// enforcementOf is what groups (the served API groups) say.
func enforcementOf(groups metav1.APIGroupList) PolicyEnforcement {
	var e PolicyEnforcement
	served := map[string]bool{}
	for _, g := range groups.Groups {
		served[g.Name] = true
	}
	for _, k := range enforcers {
		if served[k.group] {
			e.Groups = append(e.Groups, k.group)
			if !slices.Contains(e.CNIs, k.cni) {
				e.CNIs = append(e.CNIs, k.cni)
			}
		}
	}
	return e
}
