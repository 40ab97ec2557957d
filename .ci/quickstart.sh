#!/usr/bin/env bash
# The README's quick start, followed as a new user would on this checkout:
# export the token, `go install` the runner, `runner serve` on its embedded
# defaults (bwrap, SQLite, ~/.local/state/runner under a fresh HOME), then
# `runner run -session` twice, `runner sessions`, `runner sessions ID` and
# `runner sessions tail` against it. The harness is the scripted fake agent
# (no model key here), named with AGENTA_RUNNER_HARNESS_FAKE as docs/harnesses.md
# says a custom one is. Fails naming the step that broke.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
serve_pid=""
tail_pid=""
cleanup() {
  [[ -n $tail_pid ]] && kill "$tail_pid" 2>/dev/null || true
  if [[ -n $serve_pid ]]; then
    kill -INT "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
step() { echo "quickstart: $*"; }
fail() { echo "quickstart: FAILED: $*" >&2; [[ -f $work/serve.log ]] && tail -40 "$work/serve.log" >&2; exit 1; }

export HOME=$work/home
mkdir -p "$HOME"
export PATH=$work/bin:$PATH
step "go install ./cmd/runner (README: a runner on your PATH)"
GOBIN=$work/bin go install ./cmd/runner
GOBIN=$work/bin go install ./internal/agent/agenttest/fakeagent
export AGENTA_RUNNER_HARNESS_FAKE=$work/bin/fakeagent

step "export AGENTA_RUNNER_TOKEN=\$(openssl rand -hex 32)"
export AGENTA_RUNNER_TOKEN=$(openssl rand -hex 32)
# The README's port, unless something on this machine holds it.
if (exec 3<>/dev/tcp/127.0.0.1/8765) 2>/dev/null; then
  export AGENTA_RUNNER_PORT=18765
fi
base=http://127.0.0.1:${AGENTA_RUNNER_PORT:-8765}

step "runner serve (embedded defaults)"
runner serve >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 300); do
  curl -fsS "$base/health" >/dev/null 2>&1 && break
  kill -0 "$serve_pid" 2>/dev/null || fail "runner serve exited before answering /health"
  sleep 0.2
done
curl -fsS "$base/ready" >/dev/null || fail "/ready is not 200: $(curl -sS "$base/ready")"
[[ -f $HOME/.local/state/runner/runner.db ]] || fail "no SQLite store under ~/.local/state/runner"

step "runner health"
# Each command's output is read whole before it is searched: under
# pipefail, `cmd | grep -q` fails whenever grep exits at its match before
# cmd has written the rest (cmd dies of SIGPIPE), which is a race.
out=$(runner health --url "$base" -o text) || fail "runner health: $out"
grep -q ": ok" <<<"$out" || fail "runner health: $out"

step "runner run -session qs1 (on the service it finds)"
out=$(runner run -harness fake -session qs1 -o json "say hello from the quick start")
grep -q '"ok": *true' <<<"$out" || fail "first turn: $out"
grep -q 'hello from the quick start' <<<"$out" || fail "first turn's answer: $out"
out=$(runner run -harness fake -session qs1 -o json "history")
grep -q 'say hello from the quick start' <<<"$out" || fail "second turn does not continue the session: $out"

step "runner sessions, runner sessions qs1"
out=$(runner sessions -o text) && grep -q '^qs1 ' <<<"$out" || fail "runner sessions does not list qs1: $out"
out=$(runner sessions -o text qs1) && grep -q 'turn 1  completed' <<<"$out" || fail "runner sessions qs1: $out"

step "runner sessions tail qs1 follows a running turn"
runner run -harness fake -session qs1 -o json "say tailed turn
sleep 2s
say tail end" >"$work/third.json" &
third=$!
for _ in $(seq 1 100); do
  out=$(runner sessions -o json qs1) && grep -q '"running": *true' <<<"$out" && break
  sleep 0.1
done
runner sessions tail -o ndjson qs1 >"$work/tail.ndjson" &
tail_pid=$!
wait "$third" || fail "third turn: $(cat "$work/third.json")"
for _ in $(seq 1 100); do
  grep -q 'tail end' "$work/tail.ndjson" && break
  sleep 0.1
done
kill "$tail_pid" 2>/dev/null || true
grep -q 'tail end' "$work/tail.ndjson" || fail "tail did not follow the turn to its end: $(cat "$work/tail.ndjson")"
grep -q '"done"' "$work/tail.ndjson" || fail "tail saw no done: $(cat "$work/tail.ndjson")"
step "passed"
