package daytona

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
)

func TestPolicyFor(t *testing.T) {
	t.Parallel()
	var eleven []string
	for i := range 11 {
		eleven = append(eleven, fmt.Sprintf("10.0.%d.0/24", i))
	}
	tests := []struct {
		name    string
		net     sandbox.Network
		want    networkSettings
		wantErr error
	}{
		{"zero is open", sandbox.Network{}, networkSettings{}, nil},
		{"on", sandbox.Network{Mode: "on"}, networkSettings{}, nil},
		{"off", sandbox.Network{Mode: "off"}, networkSettings{NetworkBlockAll: true}, nil},
		{"empty allowlist blocks", sandbox.Network{Mode: "allowlist", Allow: []string{" "}}, networkSettings{NetworkBlockAll: true}, nil},
		{"mixed allowlist", sandbox.Network{Mode: "allowlist", Allow: []string{"api.Example.com.", "10.1.2.3", "192.168.7.9/16", "*.npmjs.org", "10.1.2.3/32"}},
			networkSettings{NetworkAllowList: "10.1.2.3/32,192.168.0.0/16", DomainAllowList: "*.npmjs.org,api.example.com"}, nil},
		{"port", sandbox.Network{Mode: "allowlist", Allow: []string{"example.com:443"}}, networkSettings{}, errdefs.ErrUnprocessable},
		{"ipv6 address", sandbox.Network{Mode: "allowlist", Allow: []string{"2001:db8::1"}}, networkSettings{}, errdefs.ErrUnprocessable},
		{"ipv6 cidr", sandbox.Network{Mode: "allowlist", Allow: []string{"2001:db8::/32"}}, networkSettings{}, errdefs.ErrUnprocessable},
		{"too many cidrs", sandbox.Network{Mode: "allowlist", Allow: eleven}, networkSettings{}, errdefs.ErrUnprocessable},
		{"unknown mode", sandbox.Network{Mode: "sometimes"}, networkSettings{}, errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policyFor(tc.net)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("policyFor = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p.settings()); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
			// What Daytona reports back for these settings reads as the same policy.
			s := p.settings()
			live := livePolicy(&apiSandbox{NetworkBlockAll: s.NetworkBlockAll, NetworkAllowList: &s.NetworkAllowList, DomainAllowList: &s.DomainAllowList})
			if !live.equal(p) {
				t.Errorf("live policy %v differs from %v", live, p)
			}
		})
	}
}
