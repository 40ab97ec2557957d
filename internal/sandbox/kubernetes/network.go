package kubernetes

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
)

// policy is a sandbox's egress policy in NetworkPolicy terms. NetworkPolicy
// filters addresses and ports only (L3/L4), so an allowlist here holds
// CIDRs and addresses; host names and *.domain entries are refused rather
// than resolved, since the addresses behind a name change and a resolved
// list would silently go stale.
type policy struct {
	mode  string // "on", "off" or "allowlist"
	cidrs []netip.Prefix
}

func policyFor(n sandbox.Network, cluster []netip.Prefix) (policy, error) {
	switch n.Mode {
	case "", "on":
		return policy{mode: "on"}, nil
	case "off":
		return policy{mode: "off"}, nil
	case "allowlist":
	default:
		return policy{}, errdefs.Invalidf("network mode %q: want on, off or allowlist", n.Mode)
	}
	refused := append(slices.Clone(egress.Ranges), cluster...)
	p := policy{mode: "allowlist"}
	for _, raw := range n.Allow {
		e := strings.TrimSpace(raw)
		var pfx netip.Prefix
		switch {
		case e == "":
			continue
		case strings.Contains(e, "/"):
			var err error
			if pfx, err = netip.ParsePrefix(e); err != nil {
				return policy{}, errdefs.Unprocessablef("network allowlist entry %q: %v", raw, err)
			}
		default:
			a, err := netip.ParseAddr(e)
			if err != nil {
				return policy{}, errdefs.Unprocessablef("network allowlist entry %q: the kubernetes provider filters addresses and CIDRs only (NetworkPolicy is L3/L4); list the addresses, without a port", raw)
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		pfx = pfx.Masked()
		for _, r := range refused {
			if r.Overlaps(pfx) {
				return policy{}, errdefs.Unprocessablef("network allowlist entry %q overlaps the refused range %s (private, link-local, metadata or the cluster's own)", raw, r)
			}
		}
		p.cidrs = append(p.cidrs, pfx)
	}
	slices.SortFunc(p.cidrs, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	p.cidrs = slices.Compact(p.cidrs)
	if len(p.cidrs) == 0 {
		// An empty allowlist allows nothing; never read it as "open".
		return policy{mode: "off"}, nil
	}
	return p, nil
}

// spec is the NetworkPolicy of sandbox name: no ingress at all (the
// daemon is reached through the API server, not the pod network) and the
// egress of p.
func (p policy) spec(name string, cluster []netip.Prefix) networkingv1.NetworkPolicySpec {
	s := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelSandbox: name}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{},
		Egress:      []networkingv1.NetworkPolicyEgressRule{},
	}
	block := func(cidr string, except []string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
	}
	switch p.mode {
	case "on":
		var v4, v6 []string
		for _, r := range append(slices.Clone(egress.Ranges), cluster...) {
			// An except must lie inside its block and be smaller than it.
			if r.Bits() == 0 {
				continue
			}
			if r.Addr().Is4() {
				v4 = append(v4, r.String())
			} else if !r.Addr().Is4In6() {
				v6 = append(v6, r.String())
			}
		}
		udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
		dns := intstr.FromInt32(53)
		s.Egress = []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{block("0.0.0.0/0", v4), block("::/0", v6)}},
			// Names still resolve: the cluster's DNS, and nothing else of it.
			{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
			},
		}
	case "allowlist":
		var to []networkingv1.NetworkPolicyPeer
		for _, c := range p.cidrs {
			to = append(to, block(c.String(), nil))
		}
		s.Egress = []networkingv1.NetworkPolicyEgressRule{{To: to}}
	}
	return s
}

// applyPolicy creates the NetworkPolicy of sandbox name, or updates it in
// place when it exists (a reopened pod whose request changed the policy).
func (p *Provider) applyPolicy(ctx context.Context, name string, pol policy) error {
	api := p.client.NetworkingV1().NetworkPolicies(p.cfg.Namespace)
	want := pol.spec(name, p.cfg.ClusterCIDRs)
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		np := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: map[string]string{
				labelManaged: managedBy, labelReplica: p.cfg.Replica, labelSandbox: name,
			}},
			Spec: want,
		}
		if _, err := api.Create(ctx, np, metav1.CreateOptions{}); err != nil {
			return p.apiErr(fmt.Errorf("create network policy %s/%s: %w", p.cfg.Namespace, name, err))
		}
		return nil
	case err != nil:
		return p.apiErr(fmt.Errorf("get network policy %s/%s: %w", p.cfg.Namespace, name, err))
	}
	cur.Spec = want
	if _, err := api.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return p.apiErr(fmt.Errorf("update network policy %s/%s: %w", p.cfg.Namespace, name, err))
	}
	return nil
}
