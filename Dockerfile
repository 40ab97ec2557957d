# The runner image: the static runner with bubblewrap, slirp4netns and
# nftables (the local sandbox) on a slim Debian, as a non-root user, data
# in a volume at /var/lib/runner.
#
#   docker build -t runner .                      # the runner (target runtime)
#   docker build -t runner:harnesses --target harnesses .   # + Node.js 20 and the pinned harnesses
#
# Build arguments: BASE (the Debian base image), GO_IMAGE (the build
# stage's toolchain), NODE_IMAGE (where Node.js 20 comes from), BINARY
# (`build` compiles from this context; `prebuilt` copies ./runner from the
# context, which is how CI builds without a registry).
#
# The local sandbox needs, in the container (README "Deploy"):
#   --security-opt seccomp=unconfined --security-opt systempaths=unconfined
#   (--security-opt apparmor=unconfined where AppArmor is on), and
#   --device /dev/net/tun for sandboxes with network "on". Not --privileged.
# The runner's start-up check names whichever is missing.

ARG BASE=debian:bookworm-slim
ARG GO_IMAGE=golang:1.26-bookworm
ARG NODE_IMAGE=node:20-bookworm-slim
ARG BINARY=build

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd cmd
COPY internal internal
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/runner ./cmd/runner

FROM scratch AS prebuilt
COPY runner /out/runner

FROM ${BINARY} AS binary

FROM ${BASE} AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap slirp4netns nftables ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/runner --shell /usr/sbin/nologin runner \
 && install -d -o runner -g runner -m 0700 /var/lib/runner
COPY --from=binary /out/runner /usr/local/bin/runner
ENV AGENTA_RUNNER_HOST=0.0.0.0 \
    AGENTA_RUNNER_PORT=8765 \
    AGENTA_RUNNER_DATA_DIR=/var/lib/runner \
    HOME=/var/lib/runner \
    AGENTA_RUNNER_LOCAL_MEMORY_MB=0 \
    AGENTA_RUNNER_LOCAL_PIDS=0 \
    AGENTA_RUNNER_LOCAL_CPUS=0 \
    AGENTA_RUNNER_LOCAL_DISK_MB=0
# Per-sandbox cgroup limits need a writable cgroup, which a non-root
# container does not get; the container's own limits (docker run --memory
# --pids-limit --cpus, Kubernetes resources) bound its sandboxes instead.
# Set the three AGENTA_RUNNER_LOCAL_* limits when you delegate a cgroup.
# Per-sandbox disk quotas loop-mount an image, which needs CAP_SYS_ADMIN
# and /dev/loop-control, which an unprivileged container has not: the
# container's volume or ephemeral-storage limit bounds its sandboxes'
# disk instead. Set it when the container runs with those.
USER runner
WORKDIR /var/lib/runner
VOLUME /var/lib/runner
EXPOSE 8765
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["runner", "health"]
ENTRYPOINT ["runner"]
CMD ["serve"]

FROM ${NODE_IMAGE} AS node

FROM runtime AS harnesses
USER root
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && install -d -m 0755 /opt/runner/harnesses
# The harnesses at their pinned versions, outside the data volume so the
# image carries them; read-only to the runner user.
ENV AGENTA_RUNNER_HARNESS_DIR=/opt/runner/harnesses
RUN HOME=/tmp/install AGENTA_RUNNER_DATA_DIR=/tmp/install runner harness install all && rm -rf /tmp/install /root/.npm
USER runner

FROM runtime
