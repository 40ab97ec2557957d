package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// Network "on" fails closed: each thing its isolated network needs, when
// missing, refuses the sandbox with the cause and the fix, while the
// provider keeps working for "off"; nothing falls back to the host's
// network.
func TestNetworkOnFailsClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("network stack end to end: skipped under -short")
	}
	netnsTool(t)
	plain := filepath.Join(t.TempDir(), "not-a-device")
	if err := os.WriteFile(plain, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  func(*local.Config)
		want []string
	}{
		{"no slirp4netns", func(c *local.Config) { c.Slirp4netns = "/nonexistent/slirp4netns" }, []string{"slirp4netns not found", "apt-get install slirp4netns"}},
		{"no tun device", func(c *local.Config) { c.TunDevice = "/nonexistent/tun" }, []string{"/nonexistent/tun is not usable", "--device /dev/net/tun"}},
		{"tun not a device", func(c *local.Config) { c.TunDevice = plain }, []string{"not a character device", "--device /dev/net/tun"}},
		{"no nsenter", func(c *local.Config) { c.Nsenter = "/nonexistent/nsenter" }, []string{"nsenter not found", "util-linux"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newBwrap(t, tc.cfg)
			_, err := p.Create(t.Context(), sandbox.Spec{Network: sandbox.Network{Mode: "on"}})
			if err == nil {
				t.Fatal("network on was not refused")
			}
			if !errors.Is(err, errdefs.ErrUnavailable) {
				t.Errorf("error class: %v", err)
			}
			for _, w := range append(tc.want, "AGENTA_RUNNER_LOCAL_NETWORK=host") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if d := p.Describe()["network_on"]; !strings.HasPrefix(d.(string), "unavailable: ") {
				t.Errorf("Describe network_on = %v", d)
			}
			// Readiness says so too, with the cause and the fix.
			if err := p.Ready(); err == nil || !strings.Contains(err.Error(), tc.want[0]) || !strings.Contains(err.Error(), "/dev/net/tun") {
				t.Errorf("Ready() = %v", err)
			}
			off := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
			if out, err := run(t, off, nil, "dial", "127.0.0.1:1"); err == nil {
				t.Errorf("control: %q", out)
			}
		})
	}

	// The table cannot be installed: the command never runs, and
	// slirp4netns does not outlive the refusal.
	t.Run("nft error", func(t *testing.T) {
		fake := filepath.Join(t.TempDir(), "nsenter")
		script := "#!/bin/sh\necho 'nftables: netlink receive: operation not permitted' >&2\nexit 1\n"
		if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		p := newBwrap(t, func(c *local.Config) { c.Nsenter = fake })
		sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "on"}})
		marker := filepath.Join(sb.Info().Workdir, "ran")
		_, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "echo > " + marker}})
		if err == nil || !strings.Contains(err.Error(), "install the sandbox's nftables table") || !strings.Contains(err.Error(), "operation not permitted") {
			t.Fatalf("Start: %v", err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the command ran although its table was not installed")
		}
		if pids := slirpChildren(); len(pids) != 0 {
			t.Errorf("slirp4netns left running: %v", pids)
		}
	})
}

func TestNetAllowRejectsBadEntries(t *testing.T) {
	needBwrap(t)
	for _, e := range []string{"127.0.0.1", "127.0.0.0/8", "not a host", "h:0", "h:99999"} {
		_, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationBwrap, NetAllow: []string{e},
			MemoryMB: local.NoLimit, Pids: local.NoLimit, CPUs: local.NoLimit, DiskMB: local.NoLimit})
		if err == nil || !strings.Contains(err.Error(), "AGENTA_RUNNER_LOCAL_NETWORK_ALLOW") {
			t.Errorf("NetAllow %q: %v", e, err)
		}
	}
}

// /health shows what network "on" is.
func TestDescribeNetworkOn(t *testing.T) {
	netnsTool(t)
	if d := newBwrap(t, nil).Describe()["network_on"]; d != local.NetworkIsolated {
		t.Errorf("network_on = %v, want %q", d, local.NetworkIsolated)
	}
	if d := newBwrap(t, func(c *local.Config) { c.Network = local.NetworkHost }).Describe()["network_on"]; d != local.NetworkHost {
		t.Errorf("network_on = %v, want %q", d, local.NetworkHost)
	}
}

// Under network "on" a runner service on the host's loopback (the key
// gateway) is served on the sandbox's own loopback; nothing else of the
// host's loopback is reachable, also not one the request lists, and no
// proxy is set.
func TestNetworkOnForwardsListedLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("network stack end to end: skipped under -short")
	}
	netnsTool(t)
	listed, other, requested := listen(t), listen(t), listen(t)
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "on", Runner: []string{listed}, Allow: []string{requested}}})
	if out, err := run(t, sb, nil, "dial", listed); err != nil || out != "hello from the host\n" {
		t.Errorf("runner service on loopback: %q, %v", out, err)
	}
	if out, err := run(t, sb, nil, "dial", other); err == nil {
		t.Errorf("unlisted loopback service reached: %q", out)
	}
	if out, err := run(t, sb, nil, "dial", requested); err == nil {
		t.Errorf("loopback service listed by the request only reached: %q", out)
	}
	if out, _ := sandboxtest.Sh(t, sb, "echo \"[$HTTP_PROXY]\""); strings.TrimSpace(out) != "[]" {
		t.Errorf("HTTP_PROXY under network on: %s", out)
	}
	// One the operator lists (AGENTA_RUNNER_LOCAL_NETWORK_ALLOW) is
	// served the same way, with nothing in the request.
	op := newBwrap(t, func(c *local.Config) { c.NetAllow = []string{other} })
	sb = createSpec(t, op, sandbox.Spec{Network: sandbox.Network{Mode: "on"}})
	if out, err := run(t, sb, nil, "dial", other); err != nil || out != "hello from the host\n" {
		t.Errorf("operator-listed loopback service: %q, %v", out, err)
	}
	if out, err := run(t, sb, nil, "dial", listed); err == nil {
		t.Errorf("loopback service listed by neither reached: %q", out)
	}
}
