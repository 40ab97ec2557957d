#!/usr/bin/env bash
# Container CI: the image, the Helm chart and the compose stack, for real
# where this machine allows it. Called by .ci/run. Needs root; no registry
# but the Go module proxy and Debian: the image's base is made here with
# debootstrap (.ci/tools.sh), and compose runs on local stand-in images.
#
#   1. image: build it (Dockerfile, BINARY=prebuilt) on the debootstrap
#      base, run it with host networking and the documented flags only, run
#      a real turn with the scripted test agent inside it (bwrap sandbox,
#      network on through slirp4netns); check that without each flag the
#      start-up check names exactly that flag.
#   2. helm: lint, template, strict decode of every manifest against the
#      Kubernetes API types (deploy/helm/test, its own Go module), for the
#      default values and for Agenta's agentRunner.* values.
#   3. compose: `docker compose config` for both files, then the stack up
#      (host networking, stand-in images) until every service is healthy.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
tools=$(.ci/tools.sh)
tool() { awk -v t="$1" '$1 == t {print $2}' <<<"$tools"; }
helm=$(tool helm)
compose=$(tool compose)
base_tar=$(tool base)
export DOCKER_HOST
DOCKER_HOST=$(.ci/dockerd.sh)
# Debian's client: it drives the engine's built-in BuildKit without buildx.
docker=/usr/bin/docker
export DOCKER_BUILDKIT=1

work=$(mktemp -d)
cleanup() {
  $docker rm -f runner-ci-image >/dev/null 2>&1 || true
  if [[ -f $work/compose.ci.yml ]]; then
    "$compose" -p runner-ci -f deploy/compose/docker-compose.yml -f "$work/compose.ci.yml" down -v >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
step() { echo "container ci: $*" >&2; }

# The base image, imported once per debootstrap tarball.
base_image=runner-ci/debian:$(basename "$(dirname "$base_tar")")
$docker image inspect "$base_image" >/dev/null 2>&1 || $docker import "$base_tar" "$base_image" >/dev/null

# --- 1. the image ---------------------------------------------------------
step "build the runner image on $base_image"
mkdir -p "$work/ctx"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/ctx/runner" ./cmd/runner
CGO_ENABLED=0 go build -o "$work/fakeagent" ./internal/agent/agenttest/fakeagent
$docker build -q --network host -f Dockerfile --build-arg BASE="$base_image" --build-arg BINARY=prebuilt \
  --target runtime -t runner-ci/runner:ci "$work/ctx" >/dev/null

# This host's /dev/net/tun may be root-only; the image runs as a non-root
# user, so hand it a node of the same device with the usual 0666 mode.
mknod -m 0666 "$work/tun" c 10 200
token=ci-container-token-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
port=18765
flags=(--security-opt seccomp=unconfined --security-opt systempaths=unconfined --device "$work/tun:/dev/net/tun")
step "run it: --network host ${flags[*]}"
$docker rm -f runner-ci-image >/dev/null 2>&1 || true
$docker run -d --name runner-ci-image --network host "${flags[@]}" \
  -v "$work/fakeagent:/usr/local/bin/fakeagent:ro" \
  -e AGENTA_RUNNER_TOKEN="$token" -e AGENTA_RUNNER_HOST=127.0.0.1 -e AGENTA_RUNNER_PORT=$port \
  -e AGENTA_RUNNER_HARNESS_FAKE=/usr/local/bin/fakeagent runner-ci/runner:ci >/dev/null
health=
for _ in $(seq 1 90); do
  health=$($docker inspect -f '{{.State.Health.Status}}' runner-ci-image)
  [[ $health == healthy ]] && break
  [[ $($docker inspect -f '{{.State.Running}}' runner-ci-image) == true ]] || break
  sleep 1
done
if [[ $health != healthy ]]; then
  $docker logs runner-ci-image >&2 || true
  echo "container ci: the image did not become healthy ($health)" >&2
  exit 1
fi
step "a real turn inside the container (bwrap sandbox, network on)"
out=$(curl -sS --max-time 60 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"harness":"fake","sessionId":"ci","projectId":"ci","messages":[{"role":"user","content":"say hello from the image\nexec id -u; grep Seccomp: /proc/self/status"}]}' \
  "http://127.0.0.1:$port/run")
if ! grep -q '"ok":true' <<<"$out" || ! grep -q 'hello from the image' <<<"$out" || ! grep -q '10001' <<<"$out" || ! grep -q 'Seccomp:\\t2' <<<"$out"; then
  echo "container ci: the turn failed: $out" >&2
  $docker logs runner-ci-image >&2 || true
  exit 1
fi
curl -sS --max-time 5 "http://127.0.0.1:$port/health" | grep -q '"isolation":"bwrap"' || {
  echo "container ci: /health does not report bwrap isolation" >&2
  exit 1
}
curl -sS --max-time 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/metrics" |
  grep -q 'agenta_runner_turn_duration_seconds_count{harness="fake",outcome="completed",provider="local",start="cold"} 1' || {
  echo "container ci: /metrics does not count the turn" >&2
  exit 1
}
$docker rm -f runner-ci-image >/dev/null

# Without each flag the start-up check must name exactly that flag.
for missing in seccomp systempaths; do
  keep=(--security-opt seccomp=unconfined --security-opt systempaths=unconfined)
  [[ $missing == seccomp ]] && keep=(--security-opt systempaths=unconfined)
  [[ $missing == systempaths ]] && keep=(--security-opt seccomp=unconfined)
  msg=$($docker run --rm --network host "${keep[@]}" -e AGENTA_RUNNER_TOKEN="$token" -e AGENTA_RUNNER_HOST=127.0.0.1 \
    -e AGENTA_RUNNER_PORT=$((port + 1)) runner-ci/runner:ci 2>&1 || true)
  if ! grep -q -- "--security-opt $missing=unconfined" <<<"$msg"; then
    echo "container ci: without $missing=unconfined the runner did not say so: $msg" >&2
    exit 1
  fi
  step "without $missing=unconfined the start-up check names it"
done

# --- 2. helm ---------------------------------------------------------------
step "helm lint and template: default values, Agenta's chart and docs values"
for values in "" deploy/helm/test/agenta-chart-values.yaml deploy/helm/test/agenta-docs-values.yaml; do
  "$helm" lint --strict deploy/helm/runner ${values:+-f "$values"} >/dev/null
  "$helm" template ci deploy/helm/runner ${values:+-f "$values"} >/dev/null
done
step "strict decode of every rendered manifest against the Kubernetes API types"
(cd deploy/helm/test && RUNNER_TEST_HELM=$helm go test -count=1 ./...)

# --- 3. compose --------------------------------------------------------------
step "docker compose config: both files"
AGENTA_RUNNER_TOKEN=$token "$compose" -f deploy/compose/docker-compose.yml config -q
AGENTA_RUNNER_TOKEN=$token "$compose" -f deploy/compose/docker-compose.agenta.yml config -q

