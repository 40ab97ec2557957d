#!/usr/bin/env bash
# Builds the S3 server the workspace tests run against: SeaweedFS's `weed`
# (Apache-2.0; S3 gateway with IAM and STS AssumeRole), from the Go module
# proxy at a pinned version, into a cache outside the checkout. Skips the
# build when the binary is already there. Prints the binary's path.
#
#   .ci/s3.sh            # build if missing, print /var/cache/runner-tools/.../weed
set -euo pipefail

name=seaweedfs
module=github.com/seaweedfs/seaweedfs
version=v0.0.0-20261109003541-7506e5f91cd6
dir=${RUNNER_TOOLS_DIR:-/var/cache/runner-tools}/$name-$version
bin=$dir/weed

if [[ -x $bin ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$dir"
# One build at a time into the cache (another CI run, a developer's
# script): the second waits and finds the binary there.
exec {lock}>"$dir.lock"
flock "$lock"
if [[ -x $bin ]]; then
  echo "$bin"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Reuse the machine's module cache: the build is long enough without
# downloading every dependency again.
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)}
export GOPATH=$work/gopath GOBIN=$work/bin GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

# The module's go.mod has replace directives, which `go install pkg@version`
# refuses: build from a copy of the module instead. -trimpath keeps the
# build cache valid whatever temp dir the copy lands in.
src=$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[[ -d $src ]] || { echo "s3.sh: could not download $module@$version" >&2; exit 1; }
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
(cd "$work/src" && go build -trimpath -ldflags=-s -o "$work/bin/weed" ./weed) >&2

cp "$work/bin/weed" "$bin.tmp"
chmod 0755 "$bin.tmp"
"$bin.tmp" version >&2
mv "$bin.tmp" "$bin"
echo "$bin"
