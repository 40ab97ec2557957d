// Package netstack is the network of the local provider's sandboxes,
// beyond the namespaces bubblewrap makes:
//
//   - network "on" (Stack, Linux): each launch's network namespace reaches
//     the internet through its own slirp4netns, behind an nftables table
//     that refuses the host and private ranges (Policy). The runner's own
//     binary, re-executed inside the namespace (SetupCommand, SetupMain),
//     puts the table in, so the sandbox never holds a capability that
//     could change it.
//   - network "allowlist": an HTTP/CONNECT proxy on a unix socket bound
//     into the sandbox (Proxy, admitting an Allowlist), the in-sandbox
//     bridge that relays loopback TCP to it (BridgeMain), and a DNS
//     forwarder that answers listed names and opens their addresses in the
//     table (DNSForwarder).
//
// The proxy, the bridge, the forwarder and the allowlist are portable; the
// isolated network and its table are Linux's, in _linux.go files.
package netstack
