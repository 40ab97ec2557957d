// Package leaktest checks that a package's tests leave no goroutine
// running: each such package's TestMain is
//
//	goleak.VerifyTestMain(m, leaktest.Global()...)
//
// Global lists the goroutines that legitimately outlive a test because
// they belong to the process, not to the code under test.
package leaktest

import "go.uber.org/goleak"

// Global is the goroutines no test owns.
func Global() []goleak.Option {
	return []goleak.Option{
		// net/http.DefaultTransport keeps idle client connections for
		// reuse across tests; they are the process's, closed at exit.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// The signal package's watcher, started by the first
		// signal.Notify (os/exec's context cancel, the CLI's handlers).
		goleak.IgnoreTopFunction("os/signal.signal_recv"),
	}
}
