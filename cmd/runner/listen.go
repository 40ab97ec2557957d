package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/agentrunner/runner/internal/config"
)

// listenerKey carries a listener in a context: in-process tests hand serve
// the socket they opened, so no port is picked, freed and raced for.
type listenerKey struct{}

// withListener returns ctx carrying ln for serve to use.
func withListener(ctx context.Context, ln net.Listener) context.Context {
	return context.WithValue(ctx, listenerKey{}, ln)
}

// metricsListenerKey carries the listener of AGENTA_RUNNER_METRICS_ADDR
// in a context, as listenerKey does the main one.
type metricsListenerKey struct{}

// withMetricsListener returns ctx carrying ln for the metrics endpoint.
func withMetricsListener(ctx context.Context, ln net.Listener) context.Context {
	return context.WithValue(ctx, metricsListenerKey{}, ln)
}

// listener is what serve accepts on: a listener passed in ctx, else one
// passed by the parent process as systemd socket activation does
// (LISTEN_FDS=1, the socket as fd 3; LISTEN_PID, when set, must be this
// process), else a new one on AGENTA_RUNNER_HOST:AGENTA_RUNNER_PORT.
func listener(ctx context.Context, cfg config.Config, environ []string) (net.Listener, error) {
	if ln, ok := ctx.Value(listenerKey{}).(net.Listener); ok {
		return ln, nil
	}
	var fds, pid string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "LISTEN_FDS="); ok {
			fds = v
		} else if v, ok := strings.CutPrefix(kv, "LISTEN_PID="); ok {
			pid = v
		}
	}
	if fds != "" && (pid == "" || pid == strconv.Itoa(os.Getpid())) {
		if fds != "1" {
			return nil, fmt.Errorf("LISTEN_FDS=%s: socket activation passes exactly one socket to runner serve", fds)
		}
		f := os.NewFile(3, "listen-fd-3")
		ln, err := net.FileListener(f)
		f.Close() // FileListener holds its own duplicate
		if err != nil {
			return nil, fmt.Errorf("LISTEN_FDS=1: fd 3 is not a listening socket: %w", err)
		}
		return ln, nil
	}
	ln, err := net.Listen("tcp", cfg.Addr())
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (set AGENTA_RUNNER_HOST / AGENTA_RUNNER_PORT)", cfg.Addr(), err)
	}
	return ln, nil
}
