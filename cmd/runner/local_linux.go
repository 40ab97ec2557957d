package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/sandbox/local"
)

// The local provider is Linux's (bubblewrap, namespaces, cgroups,
// nftables); local_other.go refuses it elsewhere.

// newLocal builds the local provider. This binary doubles as the
// in-sandbox proxy bridge that network mode "allowlist" needs.
func newLocal(cfg config.Config, eg *egress.Policy, log *slog.Logger) (sandbox.Provider, error) {
	exe, err := runnerBinary()
	if err != nil {
		return nil, fmt.Errorf("proxy bridge: %w", err)
	}
	limit := func(n int) int {
		if n == 0 {
			return local.NoLimit
		}
		return n
	}
	cpus := cfg.Local.CPUs
	if cpus == 0 {
		cpus = local.NoLimit
	}
	return local.New(local.Config{
		Dir:         filepath.Join(cfg.DataDir, "sandboxes"),
		DataDir:     cfg.DataDir,
		Isolation:   cfg.Local.Isolation,
		Bwrap:       cfg.Local.Bwrap,
		Hide:        cfg.RunnerPaths(),
		MemoryMB:    limit(cfg.Local.MemoryMB),
		Pids:        limit(cfg.Local.Pids),
		CPUs:        cpus,
		DiskMB:      limit(cfg.Local.DiskMB),
		ReserveMB:   limit(cfg.Local.DiskReserveMB),
		ProxyBridge: []string{exe, "sandbox-proxy-bridge"},
		SandboxUID:  cfg.Local.UID,
		SandboxGID:  cfg.Local.GID,
		Network:     cfg.Local.Network,
		Egress:      eg,
		Logger:      log,
	})
}

// localCommand runs the commands a local sandbox runs this binary for.
func localCommand(args []string) (code int, ok bool) {
	switch args[0] {
	case local.NetSetupCommand:
		// Run by the local provider through nsenter, in a sandbox's
		// network namespace: installs its nftables table.
		return local.NetSetupMain(), true
	case "sandbox-proxy-bridge":
		// Inside a local sandbox with a network allowlist: bridges the
		// harness's proxy port to the runner's proxy socket.
		return local.ProxyBridgeMain(args[1:]), true
	}
	return 0, false
}
