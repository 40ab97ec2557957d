// Package local runs sandboxes on the runner's own host. Each sandbox is a
// directory under Config.Dir holding work (the workspace), home and tmp.
//
// Isolation "bwrap" (the default) starts every process through bubblewrap in
// new user, mount, pid, ipc, uts and cgroup namespaces, with no capabilities,
// the host root read-only, the runner's data dir, /root, /run, the runner's
// home and Config.Hide masked, the host's unix sockets, cgroup tree and
// network interfaces in /sys masked (hostmask_linux.go), a private /proc,
// /dev and /tmp, and the workspace as the only writable host path
// (read-only with Spec.ReadOnly).
// Every network mode gets its own network namespace. "on" reaches the
// public internet through slirp4netns, with an nftables table that rejects
// the host and private ranges (package netstack); Config.Network
// "host" shares the host's instead, for development. "off" has loopback
// only; allowlist traffic leaves only through a per-sandbox HTTP/CONNECT
// proxy on a unix socket (netstack.Proxy). Memory, pids and CPU are limited by a per-sandbox cgroup
// (v2 when its controllers are usable, else v1; package cgroup), disk by a
// loop-mounted image per sandbox (disk_linux.go), and a seccomp
// filter (package seccomp, the denied list is documented there) is loaded by bwrap
// just before exec. A root runner can run sandboxes as an unprivileged host
// user (Config.SandboxUID, user.go).
//
// Isolation "none" is the Agenta runner's unconfined host process, for
// development: the environment is scrubbed, but the harness can read what the
// runner's user can read. Both are safe for concurrent use.
package local
