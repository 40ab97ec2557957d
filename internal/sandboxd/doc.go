// Package sandboxd is the in-sandbox daemon (`runner sandboxd`) and the
// types of its wire protocol; the runner's side is its subpackage client,
// so the daemon links nothing of the sandbox family. The runner uploads
// its own binary into a remote sandbox, starts it there and reaches it
// over HTTP through the provider's proxy; the daemon starts processes and
// relays their stdio, reads and writes files, and carries byte streams
// that in-sandbox processes open back to the runner.
//
// Every stream is an entry: a process, or a connection dialed on the
// daemon's unix socket. An entry has an input (offset-addressed writes, so
// a retried write is never applied twice) and an output event log whose
// events carry sequence numbers; a reader reconnects with ?after=<seq> and
// loses nothing, because events stay until acknowledged. Unacknowledged
// output is bounded: past the bound the daemon stops reading the process's
// pipes, which pushes back on the process instead of dropping bytes. The
// wire protocol is described in server.go. Server is safe for concurrent
// use.
package sandboxd
