// Package runnertest is the test kit for driving the runner end to end
// with real parts: an in-process runner.Service over the local sandbox
// provider, a SQLite store in the test's temp dir, the ACP driver and the
// scripted fake agent (agenttest); the loopback socket a `runner serve`
// accepts on, in process or as a child process; a wait for its /health;
// an authenticated client for its HTTP API that reads whole NDJSON
// streams; and a buffer a test reads while a server writes its log.
//
// It exists so the end-to-end harnesses of cmd/runner, api, runner and
// tenanttest are one piece of code: a fix to how a test starts or talks
// to a runner is made once.
package runnertest
