#!/usr/bin/env bash
# Starts a private Docker engine for the container CI, once: no bridge, no
# iptables rules (never a bridge on a private range), its own socket, data
# root in the tool cache (so images and build layers survive between runs).
# Prints the DOCKER_HOST to use.
set -euo pipefail
root=${RUNNER_TOOLS_DIR:-/var/cache/runner-tools}/docker-root
run=/run/runner-docker
sock=unix://$run/docker.sock
mkdir -p "$root" "$run"
if DOCKER_HOST=$sock docker version >/dev/null 2>&1; then
  echo "$sock"
  exit 0
fi
# An empty config file: flags only, whatever /etc/docker/daemon.json says.
echo '{}' >"$run/daemon.json"
nohup dockerd --config-file "$run/daemon.json" --host "$sock" --data-root "$root" --exec-root "$run/exec" \
  --pidfile "$run/dockerd.pid" --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
  --userland-proxy=false >"$run/dockerd.log" 2>&1 &
for _ in $(seq 1 60); do
  if DOCKER_HOST=$sock docker version >/dev/null 2>&1; then
    echo "$sock"
    exit 0
  fi
  sleep 1
done
echo "dockerd did not start; its log:" >&2
tail -n 30 "$run/dockerd.log" >&2
exit 1
