package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/peer"
	"github.com/agentrunner/runner/internal/store"
)

// sharedStore reports a store other replicas open too (PostgreSQL): its
// sessions may be held by them, and requests for those are forwarded.
func sharedStore(st store.Store) bool {
	rl, ok := st.(store.ReplicaLocal)
	return !ok || !rl.ReplicaLocal()
}

// newPeers is the client that forwards to the other replicas; nil with a
// store only this replica opens (SQLite): there is nobody to forward to.
func newPeers(cfg config.Config, st store.Store, id string, log *slog.Logger) *peer.Peers {
	if !sharedStore(st) {
		return nil
	}
	return peer.New(peer.Config{Self: id, Token: cfg.Peers.Token, Network: peer.NewNetwork(cfg.Peers.CIDRs, cfg.Peers.Domains), Registry: st,
		Heartbeat: cfg.Peers.Heartbeat, Logger: log})
}

// startHeartbeat writes this replica's first row in the registry,
// advertising the URL the others reach it at, and starts the beats; nil
// with a store only this replica opens.
func startHeartbeat(ctx context.Context, cfg config.Config, st store.Store, id string, ln net.Listener, log *slog.Logger) (*peer.Heartbeat, error) {
	if !sharedStore(st) {
		return nil, nil
	}
	url, err := advertiseURL(cfg, ln.Addr())
	if err != nil {
		return nil, err
	}
	hb := peer.NewHeartbeat(st, id, url, cfg.Peers.Heartbeat, log)
	if err := hb.Start(ctx); err != nil {
		return nil, fmt.Errorf("write this replica's row in the replica registry: %w", err)
	}
	log.Info("replica registered", "replica", id, "advertise_url", url)
	return hb, nil
}

// advertiseURL is AGENTA_RUNNER_ADVERTISE_URL, else http:// and the
// address serve listens on: its IP when it is one, the host's name when it
// listens on every address.
func advertiseURL(cfg config.Config, addr net.Addr) (string, error) {
	if cfg.Peers.AdvertiseURL != "" {
		return cfg.Peers.AdvertiseURL, nil
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return "", fmt.Errorf("derive the advertised URL from the listener %s: %w (set AGENTA_RUNNER_ADVERTISE_URL)", addr, err)
	}
	host := ap.Addr().Unmap().String()
	if ap.Addr().IsUnspecified() {
		if host, err = os.Hostname(); err != nil || host == "" {
			return "", fmt.Errorf("derive the advertised URL: the host has no name (%v); set AGENTA_RUNNER_ADVERTISE_URL", err)
		}
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(int(ap.Port()))), nil
}
