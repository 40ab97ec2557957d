#!/usr/bin/env bash
# Builds the deploy tools the container CI (.ci/container.sh) needs, from
# pinned versions, into a cache outside the checkout, and skips whatever is
# already there. Each tool lands in /var/cache/runner-tools/<tool>-<version>/.
#
#   .ci/tools.sh            # all: docker engine, helm, compose, debian base
#   .ci/tools.sh helm       # one of: docker helm compose base
#
# Prints one line per tool: "<tool> <path>".
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

tools=${RUNNER_TOOLS_DIR:-/var/cache/runner-tools}
helm_version=v3.22.0
compose_version=v2.40.3
base_suite=bookworm
# The base image is rebuilt when this stamp changes; bump it to pick up
# Debian point releases.
base_stamp=20261201
mirror=${RUNNER_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# locked NAME: hold the cache's lock for NAME until the calling shell
# (or subshell) exits, so two CI runs or a developer's script beside a CI
# run never build one tool into the same directory at once; the second
# finds it built once the first is done.
locked() {
  mkdir -p "$tools"
  exec {lock}>"$tools/$1.lock"
  flock "$lock"
}

apt_install() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# go_tool NAME VERSION PACKAGE BINARY: go install PACKAGE@VERSION into the
# cache; falls back to building from a copy of the module when its go.mod
# has replace directives (go install refuses those).
go_tool() {
  local name=$1 version=$2 pkg=$3 binary=$4 module=${5:-}
  local dir=$tools/$name-$version
  if [[ -x $dir/$binary ]]; then echo "$name $dir/$binary"; return; fi
  (
    locked "$name-$version"
    if [[ -x $dir/$binary ]]; then echo "$name $dir/$binary"; exit 0; fi
    mkdir -p "$dir"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    export GOBIN=$work/bin GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
    export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)}
    if ! go install -trimpath -ldflags=-s "$pkg@$version" >&2; then
      [[ -n $module ]] || exit 1
      src=$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
      cp -r "$src" "$work/src" && chmod -R u+w "$work/src"
      (cd "$work/src" && go build -trimpath -ldflags=-s -o "$GOBIN/$binary" "./${pkg#"$module"/}") >&2
    fi
    # go install names the binary after the last path element.
    built=$(ls "$GOBIN" | head -1)
    install -m 0755 "$GOBIN/$built" "$dir/$binary.tmp"
    mv "$dir/$binary.tmp" "$dir/$binary"
    echo "$name $dir/$binary"
  )
}

docker_engine() {
  apt_install docker.io
  echo "docker $(command -v dockerd)"
}

helm_tool() { go_tool helm "$helm_version" helm.sh/helm/v3/cmd/helm helm; }

compose_tool() {
  go_tool compose "$compose_version" github.com/docker/compose/v2/cmd docker-compose github.com/docker/compose/v2
}

# A minimal Debian root file system as a tarball for `docker import`: the
# image base when no registry is reachable.
debian_base() {
  local dir=$tools/debian-$base_suite-$base_stamp
  local tar=$dir/rootfs.tar
  if [[ -s $tar ]]; then echo "base $tar"; return; fi
  (
    locked "debian-$base_suite-$base_stamp"
    if [[ -s $tar ]]; then echo "base $tar"; exit 0; fi
    apt_install debootstrap
    mkdir -p "$dir"
    local root=$dir/rootfs.tmp
    rm -rf "$root"
    debootstrap --variant=minbase "$base_suite" "$root" "$mirror" >&2
    # Trim what an image never needs: the apt lists and caches, docs, man pages.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
      "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
    tar -C "$root" --numeric-owner -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$root"
    echo "base $tar"
  )
}

run() {
  case $1 in
  docker) docker_engine ;;
  helm) helm_tool ;;
  compose) compose_tool ;;
  base) debian_base ;;
  *) echo "tools.sh: unknown tool $1 (want docker, helm, compose or base)" >&2; exit 2 ;;
  esac
}

if (($#)); then
  for t in "$@"; do run "$t"; done
else
  # The two Go builds are the long part of a cold cache: run them side by
  # side, after the apt-based steps (which share dpkg's lock).
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  run helm >"$out/helm" &
  helm_pid=$!
  run compose >"$out/compose" &
  compose_pid=$!
  run docker
  run base
  wait "$helm_pid"
  wait "$compose_pid"
  cat "$out/helm" "$out/compose"
fi
