// Package daytona is the remote sandbox provider on Daytona: a sandbox is
// a Daytona sandbox with the runner's own daemon (package sandboxd)
// running inside, reached through the sandbox's signed preview URL.
//
// Create makes the sandbox, waits for it to start, uploads the runner
// binary when the sandbox lacks this version, starts `runner sandboxd`
// through a toolbox session and waits for its health. Processes, their
// stdio and files then go through the daemon. Pause stops (parks) the
// sandbox; Open reattaches to a sandbox by id, starting it and its daemon
// again when it was parked, and converges its network policy. Destroy
// deletes it. Daytona errors carry the API's message, the sandbox id and
// its state; only 429/502/503/504 and transport errors are retried.
// The Provider and its sandboxes are safe for concurrent use.
package daytona
