// Package peer is how replicas sharing one store reach each other. A
// request for a session another replica holds is forwarded once to that
// replica's advertised URL (Forward): the owner's status and body are the
// caller's, an NDJSON stream passes through as it is written, and the
// caller's disconnect cancels the owner's request. A forwarded request
// carries HeaderForwarded and the peer token; the replica it reaches
// answers it or refuses it and never forwards it again.
//
// A peer's address comes from the store, so it is checked when dialled
// (Network.Control): only the configured peer networks and this host are
// reached, whatever a row says. Heartbeat keeps this replica's row in the
// registry. Forward, Heartbeat and Network are safe for concurrent use.
package peer
