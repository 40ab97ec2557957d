package local

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox/local/netstack"
)

// The provider's side of its sandboxes' networks: which mode gets what of
// package netstack, and the state a sandbox keeps of it.

// Values of Config.Network.
const (
	// NetworkIsolated gives every sandbox with network "on" its own network
	// namespace, user-mode networking (slirp4netns) and an nftables table
	// that refuses the host and private networks.
	NetworkIsolated = "isolated"
	// NetworkHost shares the host's network namespace with network "on"
	// sandboxes, for development: they reach the host's loopback.
	NetworkHost = "host"
)

// newNetwork prepares mode "on" for New. A bad Config.Network or
// NetAllow fails New; a host that lacks what the isolated network needs
// does not: mode "on" is then refused per sandbox with the cause (netErr),
// never run on the host's network instead.
func (p *Provider) newNetwork() error {
	switch p.cfg.Network {
	case "", NetworkIsolated:
	case NetworkHost:
		p.log.Warn("LOCAL SANDBOXES SHARE THE HOST'S NETWORK (AGENTA_RUNNER_LOCAL_NETWORK=host): network \"on\" reaches the host's loopback (the runner, databases), its private networks and the cloud metadata endpoint; for development only")
		return nil
	default:
		return errdefs.Invalidf("AGENTA_RUNNER_LOCAL_NETWORK %q: want %q or %q", p.cfg.Network, NetworkIsolated, NetworkHost)
	}
	n, err := netstack.New(netstack.Config{Dir: p.cfg.Dir, Slirp4netns: p.cfg.Slirp4netns, Nsenter: p.cfg.Nsenter, TunDevice: p.cfg.TunDevice, Egress: p.cfg.Egress})
	if p.netErr = err; err == nil {
		p.net = n
	} else {
		p.log.Error("local sandboxes with network \"on\" are refused: their isolated network does not work on this host", logkey.Error, p.netErr)
	}
	return nil
}

// networkOn describes mode "on" for /health.
func (p *Provider) networkOn() string {
	switch {
	case p.net != nil:
		return NetworkIsolated
	case p.netErr != nil:
		return "unavailable: " + p.netErr.Error()
	}
	return NetworkHost
}

// isolated reports whether s gets its own network through slirp4netns.
func (s *Sandbox) isolated() bool {
	return s.p.bw != nil && s.p.net != nil && (s.mode == "on" || s.mode == "allowlist" && len(s.p.cfg.ProxyBridge) > 0)
}

// openNetwork works out what Spec.Network.Allow opens under mode "on", and
// starts the proxy that serves the host's loopback entries (the key
// gateway, a local model server) on the sandbox's own loopback.
func (s *Sandbox) openNetwork() error {
	entries := append(slices.Clone(s.spec.Network.Allow), s.spec.Network.Runner...)
	s.forwards = netstack.LoopbackForwards(entries)
	if !s.isolated() {
		return nil
	}
	var fw []string
	s.open, s.openTo, _ = netstack.Openings(s.spec.Network.Allow)
	fw = slices.Clone(s.forwards)
	if s.mode == "allowlist" {
		return s.startDNS()
	}
	for _, f := range s.p.net.Forwards() {
		if !slices.Contains(fw, f) {
			fw = append(fw, f)
		}
	}
	s.forwards = fw
	if len(fw) == 0 {
		return nil
	}
	if len(s.p.cfg.ProxyBridge) == 0 {
		s.log.Warn("network \"on\": the host's loopback is not reachable from this sandbox without the proxy bridge", "addresses", strings.Join(fw, ", "))
		return nil
	}
	allow, err := netstack.ParseAllowlist(fw)
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.info.ID, err)
	}
	return s.startProxy(allow)
}

// startDNS starts the DNS forwarder of an "allowlist" sandbox.
func (s *Sandbox) startDNS() error {
	sock := filepath.Join(s.root, "dns.sock")
	if len(sock) > 107 { // sun_path
		return errdefs.Unprocessablef("network mode allowlist: the DNS socket path %s is longer than a unix socket allows (108 bytes); use a shorter AGENTA_RUNNER_DATA_DIR", sock)
	}
	var err error
	s.dns, err = netstack.StartDNS(sock, s.proxy.Allowlist(), s.log, s.spec.OnEvent, s.openResolved)
	if err == nil {
		err = s.p.user().own(sock)
	}
	if err != nil {
		return fmt.Errorf("create sandbox %s: dns forwarder: %w", s.info.ID, err)
	}
	return nil
}

// openResolved opens addresses the DNS forwarder hands out in the table of
// every live process of s, and in those of processes started later.
func (s *Sandbox) openResolved(addrs []netip.Addr) error {
	// A listed name that resolves to a refused address (DNS rebinding
	// onto the metadata endpoint) opens nothing: only the operator opens
	// those.
	if _, err := s.p.cfg.Egress.Host(); err != nil {
		return err
	}
	s.mu.Lock()
	var fresh []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if s.p.cfg.Egress.Refused(a) {
			s.log.Info("network blocked: a listed name resolved to a refused address", "address", a)
			continue
		}
		if !slices.Contains(s.resolved, a) {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.resolved = append(s.resolved, fresh...)
	nets := make([]*netstack.Attachment, 0, len(s.nets))
	for a := range s.nets {
		nets = append(nets, a)
	}
	s.mu.Unlock()
	var errs []error
	for _, a := range nets {
		if err := a.OpenAddrs(fresh); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// trackNet registers a live process's network for openResolved until it
// closes, and opens what the forwarder resolved since its policy was made
// (the first seen addresses are in its table).
func (s *Sandbox) trackNet(a *netstack.Attachment, seen int) error {
	s.mu.Lock()
	if s.nets == nil {
		s.nets = map[*netstack.Attachment]struct{}{}
	}
	s.nets[a] = struct{}{}
	missed := slices.Clone(s.resolved[seen:])
	s.mu.Unlock()
	a.OnClose(func() {
		s.mu.Lock()
		delete(s.nets, a)
		s.mu.Unlock()
	})
	if len(missed) == 0 {
		return nil
	}
	return a.OpenAddrs(missed)
}

// netPolicy is the table for one launch of s (netstack.Stack.Policy). seen
// counts the DNS forwarder's addresses it holds, for trackNet.
func (s *Sandbox) netPolicy() (pol netstack.Policy, seen int, err error) {
	l := netstack.Launch{Open: s.open, OpenTo: s.openTo, Allowlist: s.mode != "on", Log: s.log}
	if l.Allowlist {
		s.mu.Lock()
		l.Resolved = slices.Clone(s.resolved)
		s.mu.Unlock()
	}
	pol, err = s.p.net.Policy(l)
	return pol, len(l.Resolved), err
}

// NetSetupCommand is the first argument with which the provider runs its
// own binary as the installer of a sandbox's nftables table
// (netstack.SetupCommand): the binary's main must dispatch it to
// NetSetupMain before anything else, and so must the TestMain of every
// test binary that starts sandboxes with network "on".
const NetSetupCommand = netstack.SetupCommand

// NetSetupMain is the installer (netstack.SetupMain), for main to
// dispatch NetSetupCommand to.
func NetSetupMain() int { return netstack.SetupMain() }

// ProxyBridgeMain is the in-sandbox bridge of network mode "allowlist"
// (netstack.BridgeMain), for the hidden subcommand Config.ProxyBridge
// names.
func ProxyBridgeMain(args []string) int { return netstack.BridgeMain(args) }
