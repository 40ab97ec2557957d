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
#      (host networking, stand-in images) until every service is healthy,
#      and a turn; then three replicas (docker-compose.replicas.yml) serving
#      each session's turns sent round them, warm.
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
  if [[ -f $work/compose.replicas.ci.yml ]]; then
    "$compose" -p runner-ci -f deploy/compose/docker-compose.yml -f deploy/compose/docker-compose.replicas.yml -f "$work/compose.ci.yml" \
      -f "$work/compose.replicas.ci.yml" down -v --remove-orphans >/dev/null 2>&1 || true
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
health=$(curl -sS --max-time 5 "http://127.0.0.1:$port/health")
grep -q '"isolation":"bwrap"' <<<"$health" || {
  echo "container ci: /health does not report bwrap isolation" >&2
  exit 1
}
metrics=$(curl -sS --max-time 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/metrics")
grep -q 'agenta_runner_turn_duration_seconds_count{harness="fake",outcome="completed",provider="local",start="cold"} 1' <<<"$metrics" || {
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

# Docker Hub is not reachable here: the stack runs on stand-in images built
# from the same Debian base (PostgreSQL 15 from Debian, SeaweedFS's weed
# from .ci/s3.sh), with host networking. The production images it names
# (postgres:16-bookworm, chrislusf/seaweedfs) are not exercised by CI.
weed=$(.ci/s3.sh)
mkdir -p "$work/pg" "$work/s3"
cat >"$work/pg/entrypoint.sh" <<'SH'
#!/bin/sh
# Stand-in for the postgres image's entrypoint: POSTGRES_USER/PASSWORD/DB, PGPORT.
set -e
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
data=/var/lib/postgresql/data
if [ ! -s "$data/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" >/tmp/pw
  "$bin/initdb" -D "$data" -U "$POSTGRES_USER" --pwfile=/tmp/pw -A scram-sha-256 >/dev/null
  rm /tmp/pw
  echo "host all all 0.0.0.0/0 scram-sha-256" >>"$data/pg_hba.conf"
  "$bin/pg_ctl" -D "$data" -o "-c listen_addresses=127.0.0.1 -p ${PGPORT:-5432}" -w start >/dev/null
  PGPASSWORD=$POSTGRES_PASSWORD psql -h 127.0.0.1 -p "${PGPORT:-5432}" -U "$POSTGRES_USER" -d postgres -qc "create database \"$POSTGRES_DB\""
  "$bin/pg_ctl" -D "$data" -w stop >/dev/null
fi
exec "$bin/postgres" -D "$data" -c listen_addresses='*' -p "${PGPORT:-5432}"
SH
cat >"$work/pg/Dockerfile" <<DOCKERFILE
FROM $base_image
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 && rm -rf /var/lib/apt/lists/* \
 && install -d -o postgres -g postgres /var/lib/postgresql/data /var/run/postgresql
COPY entrypoint.sh /usr/local/bin/entrypoint.sh
USER postgres
ENTRYPOINT ["/bin/sh", "/usr/local/bin/entrypoint.sh"]
DOCKERFILE
cp "$weed" "$work/s3/weed"
cat >"$work/s3/Dockerfile" <<DOCKERFILE
FROM $base_image
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/*
COPY weed /usr/bin/weed
DOCKERFILE
step "build the stand-in images (postgres, seaweedfs)"
$docker build -q --network host -t runner-ci/postgres:ci "$work/pg" >/dev/null
$docker build -q --network host -t runner-ci/seaweedfs:ci "$work/s3" >/dev/null

cport=18775
cat >"$work/compose.ci.yml" <<YAML
services:
  runner:
    image: runner-ci/runner:ci
    build: !reset null
    network_mode: host
    ports: !reset []
    devices: !override ["$work/tun:/dev/net/tun"]
    volumes: ["$work/fakeagent:/usr/local/bin/fakeagent:ro"]
    environment:
      AGENTA_RUNNER_HOST: 127.0.0.1
      AGENTA_RUNNER_PORT: "$cport"
      AGENTA_RUNNER_HARNESS_FAKE: /usr/local/bin/fakeagent
  postgres:
    network_mode: host
    environment:
      PGPORT: "15432"
    healthcheck:
      test: ["CMD", "pg_isready", "-h", "127.0.0.1", "-p", "15432", "-U", "runner", "-d", "runner"]
  s3:
    network_mode: host
    environment:
      S3_IP: 127.0.0.1
      S3_PORT: "18333"
      S3_MASTER_PORT: "19333"
      S3_VOLUME_PORT: "18081"
      S3_FILER_PORT: "18888"
  s3-bucket:
    network_mode: host
    environment:
      S3_MASTER: 127.0.0.1:19333
YAML
export AGENTA_RUNNER_TOKEN=$token RUNNER_POSTGRES_IMAGE=runner-ci/postgres:ci RUNNER_S3_IMAGE=runner-ci/seaweedfs:ci \
  RUNNER_POSTGRES_HOST=127.0.0.1:15432 RUNNER_S3_HOST=127.0.0.1:18333
ccompose() { "$compose" -p runner-ci -f deploy/compose/docker-compose.yml -f "$work/compose.ci.yml" "$@"; }
ccompose config -q
step "compose up (host networking) until every service is healthy"
if ! ccompose up -d --wait --wait-timeout 240 >"$work/compose-up.log" 2>&1; then
  cat "$work/compose-up.log" >&2
  ccompose ps -a >&2 || true
  ccompose logs --tail 40 >&2 || true
  echo "container ci: the compose stack did not come up healthy" >&2
  exit 1
fi
out=$(curl -sS --max-time 60 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"harness":"fake","sessionId":"compose","projectId":"ci","messages":[{"role":"user","content":"say hello from compose"}]}' \
  "http://127.0.0.1:$cport/run" 2>&1 || true)
if ! grep -q '"ok":true' <<<"$out"; then
  echo "container ci: a turn on the compose stack failed: $out" >&2
  ccompose logs --tail 40 runner >&2 || true
  exit 1
fi
step "a turn on the compose stack (PostgreSQL store, S3 workspaces) passed"

# Several replicas: docker-compose.replicas.yml laid over the same stack.
# `--scale runner=3` gives every replica the same port, which host
# networking cannot hold, so runner-2 and runner-3 are copies of the
# rendered `runner` service (replicas file included) on ports of their
# own; all else, the empty replica id and a data volume per container
# among it, is the file's. Each session's turns go round the three
# replicas: every turn must succeed, and every later one be run by the
# replica that ran its first (forwarded to it: its harness warm).
step "compose with several replicas: three runners on one PostgreSQL, each session's turns sent round them"
AGENTA_RUNNER_TOKEN=$token "$compose" -f deploy/compose/docker-compose.yml -f deploy/compose/docker-compose.replicas.yml config -q
rfiles=(-f deploy/compose/docker-compose.yml -f deploy/compose/docker-compose.replicas.yml -f "$work/compose.ci.yml")
"$compose" -p runner-ci "${rfiles[@]}" config >"$work/rendered.yml"
ports=("$cport" 18776 18777)
{
  echo "services:"
  for i in 2 3; do
    printf '  runner-%s:\n    extends: {file: %s, service: runner}\n    environment: {AGENTA_RUNNER_PORT: "%s"}\n' "$i" "$work/rendered.yml" "${ports[i - 1]}"
  done
} >"$work/compose.replicas.ci.yml"
rcompose() { "$compose" -p runner-ci "${rfiles[@]}" -f "$work/compose.replicas.ci.yml" "$@"; }
started=$SECONDS
# The stack's other services are up (and its one-shot bucket made): only
# the runners are (re)created.
if ! rcompose up -d --wait --wait-timeout 240 --no-deps runner runner-2 runner-3 >"$work/compose-up.log" 2>&1; then
  cat "$work/compose-up.log" >&2
  rcompose ps -a >&2 || true
  rcompose logs --tail 40 runner runner-2 runner-3 >&2 || true
  echo "container ci: the three replicas did not come up healthy" >&2
  exit 1
fi
ids=$(rcompose logs runner runner-2 runner-3 | grep -o 'replica registered.*' | grep -o 'replica=[^ ]*' | sort -u)
if [[ $(wc -l <<<"$ids") != 3 ]]; then
  echo "container ci: want three replica ids, one per replica; got: $ids" >&2
  exit 1
fi
for s in 0 1 2; do
  for t in 0 1 2 3; do
    port=${ports[(s + t) % 3]}
    out=$(curl -sS --max-time 60 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
      -d "{\"harness\":\"fake\",\"sessionId\":\"replicas-$s\",\"projectId\":\"ci\",\"messages\":[{\"role\":\"user\",\"content\":\"say turn $t\"}]}" \
      "http://127.0.0.1:$port/run" 2>&1 || true)
    if ! grep -q '"ok":true' <<<"$out"; then
      echo "container ci: session $s turn $t on port $port failed: $out" >&2
      rcompose logs --tail 40 runner runner-2 runner-3 >&2 || true
      exit 1
    fi
  done
done
# The ledger: each session's four turns all run by one replica, its
# first turn's (forwarded there, not taken over: a takeover runs cold).
ledger=$(rcompose exec -T -e PGPASSWORD=runner postgres psql -h 127.0.0.1 -p 15432 -U runner -d runner -tAc \
  "select session_id, count(*), count(distinct owner), min(status), max(status) from turns where project_id = 'ci' and session_id like 'replicas-%' group by 1 order by 1")
want=$'replicas-0|4|1|completed|completed\nreplicas-1|4|1|completed|completed\nreplicas-2|4|1|completed|completed'
if [[ $ledger != "$want" ]]; then
  echo "container ci: want each session's 4 turns completed by one replica (session|turns|owners|status); the ledger says:" >&2
  echo "$ledger" >&2
  exit 1
fi
step "three replicas ($(tr '\n' ' ' <<<"$ids")) served 3 sessions x 4 turns sent round them, each session's turns by its owner ($((SECONDS - started)) s)"
rcompose down -v >/dev/null 2>&1
