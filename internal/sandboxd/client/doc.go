// Package client is the runner's side of the in-sandbox daemon
// (internal/sandboxd): it starts processes in a remote sandbox and reads
// their output, reads and writes files, scans, watches, exports and
// imports trees, and accepts the channels in-sandbox processes open back
// to the runner, over the daemon's HTTP API (its wire types are
// sandboxd's). It retries through the proxies in front of the daemon,
// reconnects a stream where it left off, and asks the provider whether a
// sandbox that stops answering is gone (sandbox.ErrGone). A Process
// implements sandbox.Process; a remote provider (Daytona) is built on it.
// Client is safe for concurrent use.
package client
