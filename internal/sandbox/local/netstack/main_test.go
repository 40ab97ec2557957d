package netstack

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/leaktest"
)

// TestMain checks that the proxy and the DNS forwarder leave no goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Global()...)
}
