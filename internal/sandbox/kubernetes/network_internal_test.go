package kubernetes

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
)

var testCluster = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}

func TestPolicyFor(t *testing.T) {
	for _, tc := range []struct {
		net     sandbox.Network
		want    string // mode and CIDRs, or the error's words
		wantErr bool
	}{
		{sandbox.Network{}, "on", false},
		{sandbox.Network{Mode: "off"}, "off", false},
		{sandbox.Network{Mode: "allowlist"}, "off", false},
		{sandbox.Network{Mode: "allowlist", Allow: []string{" 93.184.215.14 ", "93.184.215.0/24", "93.184.215.0/24", "2001:db8::/32"}}, "allowlist 2001:db8::/32 93.184.215.0/24 93.184.215.14/32", false},
		{sandbox.Network{Mode: "allowlist", Allow: []string{"example.com"}}, "addresses and CIDRs only", true},
		{sandbox.Network{Mode: "allowlist", Allow: []string{"93.184.215.14:443"}}, "without a port", true},
		{sandbox.Network{Mode: "allowlist", Allow: []string{"10.1.0.0/16"}}, "overlaps the refused range 10.0.0.0/8", true},
		{sandbox.Network{Mode: "allowlist", Allow: []string{"0.0.0.0/0"}}, "overlaps", true},
		{sandbox.Network{Mode: "allowlist", Allow: []string{"198.51.100.7"}}, "198.51.100.0/24", true},
		{sandbox.Network{Mode: "allowlist", Allow: []string{"169.254.169.254"}}, "169.254.0.0/16", true},
		{sandbox.Network{Mode: "open"}, `network mode "open"`, true},
	} {
		p, err := policyFor(tc.net, testCluster)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), tc.want) || !(errors.Is(err, errdefs.ErrInvalid) || errors.Is(err, errdefs.ErrUnprocessable)) {
				t.Errorf("policyFor(%+v) = %v; want a client error containing %q", tc.net, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("policyFor(%+v): %v", tc.net, err)
			continue
		}
		got := p.mode
		for _, c := range p.cidrs {
			got += " " + c.String()
		}
		if got != tc.want {
			t.Errorf("policyFor(%+v) = %q, want %q", tc.net, got, tc.want)
		}
	}
}

func TestPolicySpec(t *testing.T) {
	off := policy{mode: "off"}.spec("sb", testCluster)
	if len(off.Egress) != 0 || len(off.Ingress) != 0 || len(off.PolicyTypes) != 2 {
		t.Errorf("off: %+v; want both directions denied", off)
	}
	on := policy{mode: "on"}.spec("sb", testCluster)
	v4 := on.Egress[0].To[0].IPBlock
	for _, must := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10", "198.51.100.0/24"} {
		if !contains(v4.Except, must) {
			t.Errorf("on: 0.0.0.0/0 does not except %s: %v", must, v4.Except)
		}
	}
	if v6 := on.Egress[0].To[1].IPBlock; v6.CIDR != "::/0" || !contains(v6.Except, "fc00::/7") || !contains(v6.Except, "fe80::/10") {
		t.Errorf("on: IPv6 block %+v", v6)
	}
	// Every except must lie inside its block, or the API server refuses
	// the policy.
	for _, peer := range on.Egress[0].To {
		block := netip.MustParsePrefix(peer.IPBlock.CIDR)
		for _, e := range peer.IPBlock.Except {
			ep := netip.MustParsePrefix(e)
			if ep.Addr().Is4() != block.Addr().Is4() || ep.Bits() <= block.Bits() {
				t.Errorf("except %s does not lie inside %s", e, block)
			}
		}
	}
	allow := policy{mode: "allowlist", cidrs: []netip.Prefix{netip.MustParsePrefix("93.184.215.0/24")}}.spec("sb", nil)
	if d := cmp.Diff("93.184.215.0/24", allow.Egress[0].To[0].IPBlock.CIDR); d != "" || len(allow.Egress) != 1 {
		t.Errorf("allowlist: %+v", allow.Egress)
	}
	if allow.PodSelector.MatchLabels[labelSandbox] != "sb" {
		t.Errorf("the policy selects %v, not the sandbox's pod", allow.PodSelector)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// The served API groups say which NetworkPolicy-enforcing CNIs are
// installed; the cluster test sees the test cluster's bridge (none).
func TestEnforcementOf(t *testing.T) {
	groups := func(names ...string) metav1.APIGroupList {
		var l metav1.APIGroupList
		for _, n := range names {
			l.Groups = append(l.Groups, metav1.APIGroup{Name: n})
		}
		return l
	}
	for _, c := range []struct {
		served []string
		want   []string
	}{
		{[]string{"apps", "networking.k8s.io", "storage.k8s.io"}, nil},
		{[]string{"apps", "cilium.io"}, []string{"Cilium"}},
		{[]string{"crd.projectcalico.org", "projectcalico.org", "policy.networking.k8s.io"}, []string{"Calico"}},
		{[]string{"crd.antrea.io", "k8s.ovn.org"}, []string{"Antrea", "OVN-Kubernetes"}},
	} {
		e := enforcementOf(groups(c.served...))
		if !slices.Equal(e.CNIs, c.want) {
			t.Errorf("served %v: CNIs %v, want %v", c.served, e.CNIs, c.want)
		}
		if (len(c.want) == 0) != strings.Contains(e.String(), "may be advisory") {
			t.Errorf("served %v: %q", c.served, e)
		}
	}
}
