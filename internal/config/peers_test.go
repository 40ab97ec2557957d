package config_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/config"
)

func TestPeerSettings(t *testing.T) {
	tok := "runner-token-0123456789"
	c, _, err := config.Load([]string{"AGENTA_RUNNER_TOKEN=" + tok})
	if err != nil {
		t.Fatal(err)
	}
	if c.Peers.Token != tok || c.Peers.AdvertiseURL != "" || len(c.Peers.CIDRs) != 0 || c.Peers.Heartbeat != 2*time.Second {
		t.Errorf("defaults: %+v", c.Peers)
	}
	c, _, err = config.Load([]string{
		"AGENTA_RUNNER_TOKEN=" + tok, "AGENTA_RUNNER_PEER_TOKEN=peer-token-0123456789",
		"AGENTA_RUNNER_ADVERTISE_URL=http://runner-0.runner-peers:8765/", "AGENTA_RUNNER_PEER_CIDRS=10.42.0.0/16, fd00::1, .Runner-Pods.agenta.svc.",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Peers{AdvertiseURL: "http://runner-0.runner-peers:8765", Token: "peer-token-0123456789",
		CIDRs: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("fd00::1/128")}, Domains: []string{".runner-pods.agenta.svc"},
		Heartbeat: 2 * time.Second}
	if diff := cmp.Diff(want, c.Peers, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Error(diff)
	}
	_, _, err = config.Load([]string{
		"AGENTA_RUNNER_PEER_TOKEN=short", "AGENTA_RUNNER_ADVERTISE_URL=http://runner-0:8765/v1?x=1", "AGENTA_RUNNER_PEER_CIDRS=10.0.0.0/33,.*.svc",
	})
	for _, want := range []string{"AGENTA_RUNNER_PEER_TOKEN is too short", "AGENTA_RUNNER_ADVERTISE_URL", `AGENTA_RUNNER_PEER_CIDRS entry "10.0.0.0/33"`, `AGENTA_RUNNER_PEER_CIDRS entry ".*.svc"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
