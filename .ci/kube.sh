#!/usr/bin/env bash
# A real single-node Kubernetes cluster for the Kubernetes sandbox
# provider's tests, built from pinned sources and run entirely inside a
# network namespace this script creates. Needs root.
#
#   .ci/kube.sh build              # build the binaries into the cache, print the dir
#   .ci/kube.sh up                 # (re)start the cluster, print the kubeconfig's path
#   .ci/kube.sh down               # stop it and remove everything it made
#   .ci/kube.sh restart-apiserver  # for the fault tests
#   .ci/kube.sh image              # rebuild the sandbox image into a running cluster
#
# RUNNER_KUBE_NAME (default runner-kube) names one cluster: its network
# namespace, the kubelet's cgroupRoot, and the defaults of its state dir
# (/var/tmp/$RUNNER_KUBE_NAME, RUNNER_KUBE_STATE) and host port
# (RUNNER_KUBE_PORT: 16443 for runner-kube, else one derived from the
# name; set it when running several). Clusters of different names run side
# by side and never touch each other: a developer's cluster survives a CI
# run's `down` of the default one, e.g.
#   RUNNER_KUBE_NAME=runner-kube-me RUNNER_KUBE_PORT=16501 .ci/kube.sh up
#
# Binaries (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kubectl from k8s.io/kubernetes, etcd from
# go.etcd.io/etcd/server/v3) are built once into
# /var/cache/runner-tools/kube-<version>/, under a lock; gVisor's runsc and
# its containerd shim (gvisor.dev/gvisor, a pinned pseudo-version) likewise
# into /var/cache/runner-tools/gvisor-<version>/, and kube-router (the
# NetworkPolicy controller, see policy_up) into kube-router-<version>/.
# containerd, runc, the CNI plugins, iptables and ipset come from Debian.
# Pods run under runc by default and under runsc with RuntimeClass gvisor
# (docs/kubernetes.md says how and why). The images (a static pause, and
# the sandbox image: the debootstrap base of .ci/tools.sh plus this
# checkout's runner and the scripted test agent) are packed here as docker
# archives and imported into containerd: no registry, no Docker.
#
# Network rule: the node (192.0.2.1 on a veth pair whose both ends stay in
# the namespace), pods (198.51.100.0/24) and services (203.0.113.0/24)
# use documentation ranges and live in netns $RUNNER_KUBE_NAME; the host
# namespace gets no address. The API server listens on 127.0.0.1:6443
# inside it; two socat relays joined by a unix socket expose it on the
# host's 127.0.0.1:$RUNNER_KUBE_PORT (16443), which is what the kubeconfig
# names. Their TCP ends set nodelay: socat leaves Nagle's algorithm on,
# which with delayed ACKs held every port-forwarded write for ~40 ms. In the cluster's private mount namespace its own directories
# under the state dir are bound over /var/lib/cni (IPAM leases, CNI
# results) and /var/log/pods, /var/log/containers (a kubelet deletes the
# pod log directories of pods it does not know, i.e. another cluster's).
#
# `up` is idempotent: it runs `down` first, so a cluster a killed CI run
# left behind never breaks the next one. Processes are tracked by the pid
# files under the state dir and by the netns's own pid list.
#
# .ci/run calls build and up before make test, and down at exit; the
# provider's cluster tests (internal/sandbox/kubernetes, RUNNER_TEST_KUBE)
# run against it. docs/kubernetes.md describes the cluster.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
repo=$(cd "$(dirname "$0")/.." && pwd)

k8s_version=v1.34.4
k8s_staging=v0.34.4
etcd_version=v3.6.5
kube_bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd)
# gVisor has no tagged releases on the module proxy, only pseudo-versions
# of its Go-buildable tree: pinned to one.
gvisor_version=v0.0.0-20260905035102-160fafc42237
gvisor_bins=(runsc shim containerd-shim-runsc-v1)
tools=${RUNNER_TOOLS_DIR:-/var/cache/runner-tools}
bin=$tools/kube-$k8s_version
gvisor_bin=$tools/gvisor-$gvisor_version
name=${RUNNER_KUBE_NAME:-runner-kube}
[[ $name =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || { echo "kube.sh: RUNNER_KUBE_NAME=$name: want [a-z0-9-], at most 31 characters" >&2; exit 2; }
state=${RUNNER_KUBE_STATE:-/var/tmp/$name}
netns=$name
if [[ $name == runner-kube ]]; then
  port=${RUNNER_KUBE_PORT:-16443}
else
  port=${RUNNER_KUBE_PORT:-$((16444 + $(printf %s "$name" | cksum | cut -d' ' -f1) % 500))}
fi
node=runner-node
node_ip=192.0.2.1
pod_cidr=198.51.100.0/24
svc_cidr=203.0.113.0/24
# The namespace the provider's tests create sandboxes in.
sandbox_ns=${RUNNER_KUBE_NAMESPACE:-runner-sandboxes}
# Local PersistentVolumes made for the parking tests.
pv_count=${RUNNER_KUBE_VOLUMES:-40}

log() { echo "kube.sh: $*" >&2; }
die() { log "$*"; exit 1; }

apt_install() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# --- build -----------------------------------------------------------------

built() {
  local b
  for b in "${kube_bins[@]}"; do [[ -x $bin/$b ]] || return 1; done
}

gvisor_built() {
  local b
  for b in "${gvisor_bins[@]}"; do [[ -x $gvisor_bin/$b ]] || return 1; done
}

# locked NAME CHECK BUILD: runs BUILD under a lock on the cache entry NAME
# unless CHECK already holds, so two CI runs (or a run and a developer)
# never build into it at once; the second waits and then finds it built.
locked() {
  "$2" && return
  mkdir -p "$tools"
  local lock
  exec {lock}>"$tools/$1.lock"
  flock "$lock"
  "$2" || "$3"
  exec {lock}>&-
}

build() {
  locked "kube-$k8s_version" built build_locked
  [[ $policy == none ]] || locked "kube-router-$kube_router_version" policy_built build_policy
  locked "gvisor-$gvisor_version" gvisor_built build_gvisor
  echo "$bin"
}

# build_gvisor builds runsc and its containerd shim (the module's shim
# package, installed under the name containerd looks up for the runtime
# type io.containerd.runsc.v1). One patch, at build time: the shim's start
# lowers its daemon's OOM score to -999 and fails the pod if it may not,
# which root here may not (no CAP_SYS_RESOURCE, the trap runc's
# restrict_oom_score_adj answers; runsc's shim has no such knob). Patched,
# a refusal leaves the score as inherited.
build_gvisor() {
  local work src; work=$(mktemp -d)
  export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)}
  src=$(GOFLAGS=-mod=mod go mod download -json "gvisor.dev/gvisor@$gvisor_version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $src ]] || die "could not download gvisor.dev/gvisor@$gvisor_version"
  cp -r "$src" "$work/gvisor" && chmod -R u+w "$work/gvisor"
  local m=$work/gvisor/pkg/shim/v1/manager.go
  sed -i 's/if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {/if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil \&\& !os.IsPermission(err) {/' "$m"
  grep -q 'oomScoreMax); err != nil && !os.IsPermission(err)' "$m" || die "gvisor $gvisor_version: the shim's OOM score call moved; update the patch in build_gvisor"
  log "building gVisor runsc and containerd-shim-runsc-v1 $gvisor_version (minutes on first use)"
  (cd "$work/gvisor" && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off \
    go build -trimpath -ldflags=-s -o "$work/out/" ./runsc ./shim) >&2
  mkdir -p "$gvisor_bin"
  install -m 0755 "$work/out/shim" "$gvisor_bin/shim.tmp" && mv "$gvisor_bin/shim.tmp" "$gvisor_bin/shim"
  # The shim is built on containerd 2's shim library, whose start prints
  # its bootstrap parameters as JSON ({"version":2,"address":…}); Debian's
  # containerd 1.6 reads a bare address. This wrapper, under the name
  # containerd looks up, hands every other verb to the shim unchanged.
  cat >"$work/wrapper" <<'EOF'
#!/bin/bash
shim=$(dirname "$0")/shim
[[ ${!#} == start ]] || exec "$shim" "$@"
out=$("$shim" "$@") || exit
sed -n 's/.*"address":"\([^"]*\)".*/\1/p' <<<"$out"
EOF
  install -m 0755 "$work/wrapper" "$gvisor_bin/containerd-shim-runsc-v1.tmp" && mv "$gvisor_bin/containerd-shim-runsc-v1.tmp" "$gvisor_bin/containerd-shim-runsc-v1"
  install -m 0755 "$work/out/runsc" "$gvisor_bin/runsc.tmp" && mv "$gvisor_bin/runsc.tmp" "$gvisor_bin/runsc"
  rm -rf "$work"
}

build_locked() {
  local want=("${kube_bins[@]}") b
  mkdir -p "$bin"
  local work; work=$(mktemp -d)
  export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)}
  export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off
  local src
  # The module zip has no staging/ tree and an empty vendor/: point every
  # staging replace at the published module of the same release.
  src=$(go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $src ]] || die "could not download k8s.io/kubernetes@$k8s_version"
  cp -r "$src" "$work/k8s" && chmod -R u+w "$work/k8s"
  rm -rf "$work/k8s/vendor" "$work/k8s/go.work" "$work/k8s/go.work.sum"
  sed -i -E "s#^(\s*k8s.io/[a-z-]+) => ./staging/src/k8s.io/[a-z-]+#\1 => \1 $k8s_staging#" "$work/k8s/go.mod"
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl $k8s_version (minutes on first use)"
  # One go build for all five: they share most packages.
  (cd "$work/k8s" && go build -trimpath -ldflags=-s -o "$work/out/" ./cmd/kube-apiserver ./cmd/kube-controller-manager \
    ./cmd/kube-scheduler ./cmd/kubelet ./cmd/kubectl) >&2
  src=$(go mod download -json "go.etcd.io/etcd/server/v3@$etcd_version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $src ]] || die "could not download go.etcd.io/etcd/server/v3@$etcd_version"
  cp -r "$src" "$work/etcd" && chmod -R u+w "$work/etcd"
  # Its replaces point into the etcd repository; use the published modules.
  sed -i -E '/=> \.\.\//d' "$work/etcd/go.mod"
  log "building etcd $etcd_version"
  (cd "$work/etcd" && go build -trimpath -ldflags=-s -o "$work/out/etcd" .) >&2
  for b in "${want[@]}"; do install -m 0755 "$work/out/$b" "$bin/$b.tmp" && mv "$bin/$b.tmp" "$bin/$b"; done
  rm -rf "$work"
}

# --- images ----------------------------------------------------------------

# docker_archive OUT TAG ENTRYPOINT LAYER...: a docker-archive tar (what
# `docker save` writes) of the given layer tars, for `ctr images import`.
# ENTRYPOINT is a JSON list, or "" for none (the pod names the command).
docker_archive() {
  local out=$1 tag=$2 entry=$3; shift 3
  local d; d=$(mktemp -d)
  local layers=() diffs=() l i=0 sum
  for l in "$@"; do
    sum=$(sha256sum "$l" | cut -d' ' -f1)
    mkdir -p "$d/$sum" && ln "$l" "$d/$sum/layer.tar" 2>/dev/null || cp "$l" "$d/$sum/layer.tar"
    layers+=("\"$sum/layer.tar\"") diffs+=("\"sha256:$sum\"")
    i=$((i + 1))
  done
  local IFS=,
  printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]%s},"rootfs":{"type":"layers","diff_ids":[%s]}}' \
    "${entry:+,\"Entrypoint\":$entry}" "${diffs[*]}" >"$d/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":[%s]}]' "$tag" "${layers[*]}" >"$d/manifest.json"
  tar -C "$d" -cf "$out" .
  rm -rf "$d"
}

images() {
  local img=$state/images
  mkdir -p "$img/pause/root" "$img/sandbox/root/usr/local/bin"
  # pause: a static Go program that sleeps until signalled.
  cat >"$img/pause.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
EOF
  (cd "$img" && CGO_ENABLED=0 GOFLAGS= go build -trimpath -ldflags=-s -o pause/root/pause pause.go)
  tar -C "$img/pause/root" -cf "$img/pause-layer.tar" .
  docker_archive "$img/pause.tar" runner.local/pause:1 '["/pause"]' "$img/pause-layer.tar"
  # sandbox: the Debian base plus this checkout's runner (for `runner
  # sandboxd`) and the scripted agent.
  # RUNNER_KUBE_BASE: another root file system tarball to build it on.
  local base=${RUNNER_KUBE_BASE:-}
  [[ -n $base ]] || base=$("$repo/.ci/tools.sh" base | awk '{print $2}')
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$img/sandbox/root/usr/local/bin/runner" ./cmd/runner &&
    CGO_ENABLED=0 go build -trimpath -o "$img/sandbox/root/usr/local/bin/fakeagent" ./internal/agent/agenttest/fakeagent)
  tar -C "$img/sandbox/root" --owner=0 --group=0 -cf "$img/sandbox-layer.tar" .
  docker_archive "$img/sandbox.tar" runner.local/sandbox:ci '["/usr/local/bin/runner","sandboxd"]' "$base" "$img/sandbox-layer.tar"
  local ctr=(ctr --address "$state/containerd/containerd.sock" -n k8s.io)
  "${ctr[@]}" images import "$img/pause.tar" >/dev/null
  "${ctr[@]}" images import "$img/sandbox.tar" >/dev/null
  rm -f "$img"/*-layer.tar
}

# --- PKI -------------------------------------------------------------------

pki() {
  local p=$state/pki
  mkdir -p "$p"
  cd "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=runner-kube-ca 2>/dev/null
  cert() { # name subject [sans]
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    local ext=$1.ext
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
    [[ -n ${3:-} ]] && echo "subjectAltName=$3" >>"$ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 -extfile "$ext" 2>/dev/null
  }
  cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:$node_ip,IP:203.0.113.1,DNS:kubernetes,DNS:kubernetes.default,DNS:localhost"
  cert apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert kubelet "/O=system:nodes/CN=system:node:$node" "IP:$node_ip,DNS:$node"
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  # Static tokens: the admin the tests use, the scheduler, the controller
  # manager (which runs every controller under its one identity here, no
  # per-controller service accounts, hence system:masters on this test
  # cluster), and "limited", a user the RBAC tests bind to a Role that
  # lacks verbs.
  admin=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  sched=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  cm=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  limited=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  cat >tokens.csv <<EOF
$admin,runner-admin,1,"system:masters"
$sched,system:kube-scheduler,2
$cm,system:kube-controller-manager,4,"system:masters"
$limited,runner-limited,3
EOF
  kubeconfig() { # file server token
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster: {server: "$2", certificate-authority: $p/ca.crt}
users:
- name: user
  user: {token: "$3"}
contexts:
- name: $name
  context: {cluster: $name, user: user, namespace: $sandbox_ns}
current-context: $name
EOF
  }
  kubeconfig "$state/kubeconfig" "https://127.0.0.1:$port" "$admin"
  kubeconfig "$state/kubeconfig-limited" "https://127.0.0.1:$port" "$limited"
  kubeconfig "$p/scheduler.kubeconfig" https://127.0.0.1:6443 "$sched"
  kubeconfig "$p/controller-manager.kubeconfig" https://127.0.0.1:6443 "$cm"
  cat >"$p/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: $p/ca.crt}
users:
- name: u
  user: {client-certificate: $p/kubelet.crt, client-key: $p/kubelet.key}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
EOF
  cd - >/dev/null
}

# --- up / down -------------------------------------------------------------

# start_apiserver runs kube-apiserver in the background (inside the netns:
# inner, or restart-apiserver through nsenter) and records its pid.
start_apiserver() {
  local s=$state
  "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 \
    --secure-port=6443 --advertise-address="$node_ip" --token-auth-file="$s/pki/tokens.csv" \
    --client-ca-file="$s/pki/ca.crt" --tls-cert-file="$s/pki/apiserver.crt" --tls-private-key-file="$s/pki/apiserver.key" \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$s/pki/sa.pub" \
    --service-account-signing-key-file="$s/pki/sa.key" --service-cluster-ip-range="$svc_cidr" \
    --authorization-mode=Node,RBAC --kubelet-client-certificate="$s/pki/apiserver-kubelet.crt" \
    --kubelet-client-key="$s/pki/apiserver-kubelet.key" --kubelet-preferred-address-types=InternalIP \
    >>"$s/logs/apiserver.log" 2>&1 </dev/null &
  echo $! >"$s/apiserver.pid"
}

# wait_apiserver waits (inside the netns) until the API server is ready:
# minutes, not seconds, since a loaded CI machine starts it slowly. /readyz
# is 403 to anonymous callers until RBAC's bootstrap is done, hence -f.
wait_apiserver() {
  local s=$state i
  for i in $(seq 1 480); do
    curl -sf --cacert "$s/pki/ca.crt" https://127.0.0.1:6443/readyz >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "apiserver not ready" >&2
  tail -20 "$s/logs/apiserver.log" >&2
  return 1
}

# The part that runs inside the netns and a private mount namespace: every
# mount kubelet and containerd make vanishes with it.
inner() {
  set -euo pipefail
  ip link set lo up
  ip link add node0 type veth peer name node1
  ip addr add "$node_ip/24" dev node0
  ip link set node0 up
  ip link set node1 up
  ip route add default dev node0 2>/dev/null || true
  local s=$state d
  mkdir -p "$s/cni" "$s/containerd" "$s/kubelet" "$s/logs"
  # Host paths every kubelet or CNI plugin shares, made this cluster's own
  # (in this mount namespace only): see the header.
  for d in /var/lib/cni /var/log/pods /var/log/containers; do
    mkdir -p "$d" "$s/host$d"
    mount --bind "$s/host$d" "$d"
  done
  cat >"$s/cni/10-bridge.conflist" <<EOF
{"cniVersion":"1.0.0","name":"$name","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"$pod_cidr"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"loopback"}]}
EOF
  cat >"$s/containerd/config.toml" <<EOF
version = 2
root = "$s/containerd/root"
state = "$s/containerd/state"
[grpc]
  address = "$s/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "runner.local/pause:1"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$s/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
    runtime_type = "io.containerd.runsc.v1"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
      TypeUrl = "io.containerd.runsc.v1.options"
      ConfigPath = "$s/containerd/runsc.toml"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc-netstack]
    runtime_type = "io.containerd.runsc.v1"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc-netstack.options]
      TypeUrl = "io.containerd.runsc.v1.options"
      ConfigPath = "$s/containerd/runsc-netstack.toml"
EOF
  # gVisor's runtime (RuntimeClass gvisor). systrap needs no KVM. network
  # host: containerd's CRI port-forward (the provider's only channel) dials
  # the port in the pod's network namespace, where gVisor's own network
  # stack (network sandbox) listens nowhere; see docs/kubernetes.md.
  # oci-seccomp: apply the pod's seccomp profile inside the sandbox, which
  # runsc otherwise ignores. Its state under this cluster's state dir, so
  # clusters side by side never see each other's containers.
  cat >"$s/containerd/runsc.toml" <<EOF
binary_name = "$gvisor_bin/runsc"
root = "$s/runsc"
[runsc_config]
  platform = "systrap"
  network = "host"
  oci-seccomp = "true"
EOF
  # runsc-netstack (RuntimeClass gvisor-netstack): gVisor's default network
  # stack, for the test that the provider's error says why it cannot work.
  sed 's/network = "host"/network = "sandbox"/' "$s/containerd/runsc.toml" >"$s/containerd/runsc-netstack.toml"
  cat >"$s/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
address: $node_ip
authentication:
  anonymous: {enabled: false}
  x509: {clientCAFile: $s/pki/ca.crt}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
tlsCertFile: $s/pki/kubelet.crt
tlsPrivateKeyFile: $s/pki/kubelet.key
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
podCIDR: $pod_cidr
resolvConf: ""
cgroupRoot: /$name
EOF
  run() { # name args...: start in the background, record the pid
    local name=$1; shift
    "$@" >"$s/logs/$name.log" 2>&1 &
    echo $! >"$s/$name.pid"
  }
  run etcd "$bin/etcd" --data-dir "$s/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 --unsafe-no-fsync
  # containerd finds a runtime type's shim on its PATH.
  run containerd env PATH="$gvisor_bin:$PATH" containerd --config "$s/containerd/config.toml"
  start_apiserver
  run relay socat UNIX-LISTEN:"$s/apiserver.sock",fork,unlink-early TCP:127.0.0.1:6443,nodelay
  local i
  wait_apiserver
  run scheduler "$bin/kube-scheduler" --kubeconfig="$s/pki/scheduler.kubeconfig" --leader-elect=false \
    --authentication-skip-lookup --authorization-always-allow-paths=/healthz,/readyz,/livez --secure-port=0
  # The controller manager makes each namespace's default service account
  # and kube-root-ca.crt, binds PVCs, collects garbage and deletes
  # namespaces: what a real cluster does that the tests lean on.
  run controller-manager "$bin/kube-controller-manager" --kubeconfig="$s/pki/controller-manager.kubeconfig" \
    --leader-elect=false --secure-port=0 --service-account-private-key-file="$s/pki/sa.key" \
    --root-ca-file="$s/pki/ca.crt" --cluster-cidr="$pod_cidr" --service-cluster-ip-range="$svc_cidr" \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  for i in $(seq 1 60); do [[ -S $s/containerd/containerd.sock ]] && break; sleep 0.5; done
  # kubelet's cgroupRoot must exist in every hierarchy; `down` removes it.
  local h
  for h in /sys/fs/cgroup/*/; do mkdir -p "$h/$name" 2>/dev/null || true; done
  run kubelet "$bin/kubelet" --config="$s/kubelet/config.yaml" --kubeconfig="$s/pki/kubelet.kubeconfig" \
    --container-runtime-endpoint="unix://$s/containerd/containerd.sock" --node-ip="$node_ip" \
    --hostname-override="$node" --root-dir="$s/kubelet/root" --cert-dir="$s/kubelet/pki"
  # Stay alive as the mount namespace's anchor until `down` kills us.
  echo $$ >"$s/inner.pid"
  wait
}

down() {
  [[ -d $state ]] || { ip netns del "$netns" 2>/dev/null || true; return 0; }
  local f pid
  for f in "$state"/*.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  # Whatever is left in the namespace (containerd shims, pod processes)
  # was started by this cluster.
  if [[ -e /run/netns/$netns ]]; then
    for pid in $(ip netns pids "$netns" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 50); do [[ -z $(ip netns pids "$netns" 2>/dev/null) ]] && break; sleep 0.2; done
    for pid in $(ip netns pids "$netns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$netns" 2>/dev/null || true
  fi
  # The cgroups kubelet made under its cgroupRoot, in every hierarchy:
  # exactly this cluster's root (runner-kube's must not match runner-kube2).
  local h
  for h in /sys/fs/cgroup /sys/fs/cgroup/*/; do
    h=${h%/}
    [[ -d $h/$name ]] && find "$h/$name" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$state"
}

up() {
  apt_install containerd runc containernetworking-plugins socat openssl curl iproute2
  build >/dev/null
  down
  # Another cluster (or anything) on the port would answer our readiness
  # checks with the wrong certificate: refuse it by name.
  if ss -Htln "sport = :$port" | grep -q .; then
    die "127.0.0.1:$port is in use (another cluster?): set RUNNER_KUBE_PORT for $name"
  fi
  mkdir -p "$state"
  pki
  ip netns add "$netns"
  # setsid: the cluster outlives this script; `down` stops it by pid.
  state=$state bin=$bin setsid nsenter --net="/run/netns/$netns" unshare --mount --propagation slave \
    bash -c "$(declare -f inner start_apiserver wait_apiserver); $(declare -p state bin gvisor_bin node_ip pod_cidr svc_cidr node name); inner" \
    </dev/null >"$state/inner.log" 2>&1 &
  echo $! >"$state/nsenter.pid"
  local i
  for i in $(seq 1 600); do
    [[ -f $state/inner.pid ]] && break
    kill -0 "$(cat "$state/nsenter.pid")" 2>/dev/null || break
    sleep 0.5
  done
  [[ -f $state/inner.pid ]] || { cat "$state/inner.log" >&2; tail -20 "$state/logs/"*.log >&2 || true; die "the cluster did not start"; }
  setsid socat TCP-LISTEN:"$port",bind=127.0.0.1,fork,reuseaddr,nodelay UNIX-CONNECT:"$state/apiserver.sock" </dev/null >/dev/null 2>&1 &
  echo $! >"$state/hostrelay.pid"
  k() { curl -sf --cacert "$state/pki/ca.crt" -H "Authorization: Bearer $(awk -F, 'NR==1{print $1}' "$state/pki/tokens.csv")" "$@"; }
  for i in $(seq 1 60); do k "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
  images
  # kubectl from here on: the API server pretty-prints JSON for curl,
  # which no grep of compact JSON matches.
  local kc=("$bin/kubectl" --kubeconfig "$state/kubeconfig")
  # The node object appears when the kubelet registers; wait needs it.
  for i in $(seq 1 360); do "${kc[@]}" get node "$node" >/dev/null 2>&1 && break; sleep 0.5; done
  "${kc[@]}" wait --for=condition=Ready "node/$node" --timeout=180s >/dev/null ||
    { tail -30 "$state/logs/kubelet.log" >&2; die "node $node did not become Ready"; }
  "${kc[@]}" create namespace "$sandbox_ns" >/dev/null
  # The controller manager makes the namespace's default service account,
  # which pod admission requires.
  for i in $(seq 1 240); do "${kc[@]}" -n "$sandbox_ns" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done
  "${kc[@]}" -n "$sandbox_ns" get serviceaccount default >/dev/null ||
    { tail -30 "$state/logs/controller-manager.log" >&2; die "no default service account in $sandbox_ns (controller manager)"; }
  # "limited" may create and read pods but not port-forward to them nor
  # touch NetworkPolicies: the provider's boot check must name those.
  "${kc[@]}" -n "$sandbox_ns" create role limited --verb=get,list,watch,create,delete --resource=pods >/dev/null
  "${kc[@]}" -n "$sandbox_ns" create rolebinding limited --role=limited --user=runner-limited >/dev/null
  volumes
  # RuntimeClass gvisor: pods naming it run under runsc (containerd's
  # runtime of that handler, configured in inner); gvisor-netstack likewise
  # with gVisor's own network stack.
  printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor-netstack}\nhandler: runsc-netstack\n' |
    "${kc[@]}" apply -f - >/dev/null
  policy_up
  smoke
  smoke gvisor
  echo "$state/kubeconfig"
}

# volumes: StorageClass runner-local and a pool of local PersistentVolumes
# on the node for the provider's parking tests (no provisioner runs here).
# Each is used once (Retain): $pv_count bounds the claims a run may make.
volumes() {
  local kc=("$bin/kubectl" --kubeconfig "$state/kubeconfig") i y=$state/volumes.yaml
  cat >"$y" <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: runner-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF
  for i in $(seq -w 1 "$pv_count"); do
    # Mode 0777: the pod's uid owns nothing here, and a local volume's
    # subPaths take the mode of its root.
    mkdir -p "$state/pv/$i" && chmod 0777 "$state/pv/$i"
    cat >>"$y" <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: runner-pv-$i}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: runner-local
  local: {path: $state/pv/$i}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$node]}]
EOF
  done
  "${kc[@]}" apply -f "$y" >/dev/null
}

# --- NetworkPolicy controller ----------------------------------------------

# The CNI bridge plugin enforces no NetworkPolicy. kube-router, run as a
# policy controller only (no routing, no service proxy) beside it, does:
# it watches pods, namespaces and NetworkPolicies and writes iptables and
# ipset rules in the cluster's netns (pod-to-pod traffic crosses the
# bridge, hence bridge-nf-call-iptables, a per-netns sysctl).
# RUNNER_KUBE_POLICY=none starts the cluster without it, to see what a
# cluster that does not enforce NetworkPolicy looks like.
kube_router_version=v2.1.0
policy_dir=$tools/kube-router-$kube_router_version
policy=${RUNNER_KUBE_POLICY:-kube-router}

policy_built() { [[ -x $policy_dir/kube-router ]]; }

build_policy() {
  local work src; work=$(mktemp -d)
  src=$(GOFLAGS=-mod=mod GOWORK=off go mod download -json "github.com/cloudnativelabs/kube-router/v2@$kube_router_version" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $src ]] || die "could not download github.com/cloudnativelabs/kube-router/v2@$kube_router_version"
  cp -r "$src" "$work/src" && chmod -R u+w "$work/src"
  log "building kube-router $kube_router_version (minutes on first use)"
  (cd "$work/src" && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off \
    go build -trimpath -ldflags=-s -o "$work/kube-router" ./cmd/kube-router) >&2
  mkdir -p "$policy_dir"
  install -m 0755 "$work/kube-router" "$policy_dir/kube-router.tmp" && mv "$policy_dir/kube-router.tmp" "$policy_dir/kube-router"
  rm -rf "$work"
}

# policy_up starts kube-router in the netns under a service account of its
# own, bound to a ClusterRole that reads what it needs and nothing more,
# and waits until it has written its chains.
policy_up() {
  case $policy in
    none) log "RUNNER_KUBE_POLICY=none: no NetworkPolicy controller, policies are advisory"; return 0 ;;
    kube-router) ;;
    *) die "RUNNER_KUBE_POLICY=$policy: want kube-router or none" ;;
  esac
  apt_install iptables ipset
  locked "kube-router-$kube_router_version" policy_built build_policy
  local kc=("$bin/kubectl" --kubeconfig "$state/kubeconfig") i
  "${kc[@]}" apply -f - >/dev/null <<'RBAC'
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-router, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-router}
rules:
- apiGroups: [""]
  resources: [pods, namespaces, nodes, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-router}
subjects: [{kind: ServiceAccount, name: kube-router, namespace: kube-system}]
RBAC
  local token; token=$("${kc[@]}" -n kube-system create token kube-router --duration=48h)
  (umask 077; cat >"$state/pki/kube-router.kubeconfig") <<KC
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: $state/pki/ca.crt}
users:
- name: u
  user: {token: "$token"}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
KC
  # Outside the cluster's mount namespace (it needs none of its mounts);
  # `down` stops it by its pid file, and the netns's pid list.
  setsid nsenter --net="/run/netns/$netns" sh -c 'echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables && exec "$@"' sh \
    "$policy_dir/kube-router" --kubeconfig="$state/pki/kube-router.kubeconfig" --hostname-override="$node" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-ipv6=false \
    --service-cluster-ip-range="$svc_cidr" \
    --metrics-port=0 </dev/null >"$state/logs/kube-router.log" 2>&1 &
  echo $! >"$state/kube-router.pid"
  for i in $(seq 1 240); do
    ip netns exec "$netns" iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 && break
    kill -0 "$(cat "$state/kube-router.pid")" 2>/dev/null || break
    sleep 0.5
  done
  ip netns exec "$netns" iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 ||
    { tail -30 "$state/logs/kube-router.log" >&2; die "kube-router wrote no iptables chains"; }
  log "NetworkPolicy enforced by kube-router $kube_router_version (policy controller only)"
}

# smoke [RUNTIMECLASS]: a pod of the sandbox image runs (under that
# RuntimeClass), and exec reaches it through the API server (kubectl,
# itself client-go); the provider's tests go further.
smoke() {
  local kc=("$bin/kubectl" --kubeconfig "$state/kubeconfig" -n "$sandbox_ns")
  local t0=$SECONDS rc=${1:-} pod=kube-smoke${1:+-$1}
  "${kc[@]}" run "$pod" --image=runner.local/sandbox:ci --restart=Never \
    ${rc:+--overrides="{\"apiVersion\":\"v1\",\"spec\":{\"runtimeClassName\":\"$rc\"}}"} --command -- sleep 600 >/dev/null
  if ! "${kc[@]}" wait --for=condition=Ready "pod/$pod" --timeout=180s >/dev/null; then
    "${kc[@]}" describe pod "$pod" >&2 || true
    tail -30 "$state/logs/kubelet.log" >&2
    die "the smoke pod $pod did not become Ready"
  fi
  # Under gVisor the kernel the pod sees is gVisor's (dmesg is its own).
  local out; out=$("${kc[@]}" exec "$pod" -- sh -c 'echo smoke-ok; dmesg 2>/dev/null | grep -c gVisor || true')
  [[ $out == smoke-ok* ]] || die "exec in the smoke pod $pod said $out"
  if [[ -n $rc && ${out#*$'\n'} == 0 ]]; then die "the smoke pod $pod (RuntimeClass $rc) does not run under gVisor"; fi
  "${kc[@]}" delete pod "$pod" --grace-period=0 --force >/dev/null 2>&1
  log "a pod${rc:+ under RuntimeClass $rc} ran and answered exec in $((SECONDS - t0)) s"
}

# restart_apiserver stops the API server and starts it again, for the
# provider's fault tests: it joins the cluster's network and mount
# namespaces through the anchor process.
restart_apiserver() {
  [[ -f $state/inner.pid ]] || die "no cluster is up (no $state/inner.pid)"
  local pid; pid=$(cat "$state/apiserver.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  setsid -w nsenter -t "$(cat "$state/inner.pid")" -n -m \
    bash -c "$(declare -f start_apiserver wait_apiserver); $(declare -p state bin node_ip svc_cidr); start_apiserver; wait_apiserver" </dev/null
  log "the API server restarted (pid $(cat "$state/apiserver.pid"))"
}

# image rebuilds the sandbox image from this checkout into a running
# cluster (after a change to runner sandboxd, say).
image() {
  [[ -f $state/inner.pid ]] || die "no cluster is up (no $state/inner.pid)"
  images
}

case ${1:-} in
  build) build ;;
  up) up ;;
  down) down ;;
  restart-apiserver) restart_apiserver ;;
  image) image ;;
  *) echo "usage: $0 build|up|down|restart-apiserver|image" >&2; exit 2 ;;
esac
