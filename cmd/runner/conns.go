package main

import (
	"syscall"

	"github.com/agentrunner/runner/internal/config"
)

// maxConnections is AGENTA_RUNNER_MAX_CONNECTIONS, by default half the
// descriptor limit: the other half is for what the turns open (sandbox
// pipes, sockets, the store), so that idle clients cannot starve them.
func maxConnections(cfg config.Config) int {
	if cfg.HTTP.MaxConnections > 0 {
		return cfg.HTTP.MaxConnections
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 512
	}
	return int(max(min(lim.Cur/2, 1<<20), 64))
}
