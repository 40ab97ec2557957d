package river

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/leaktest"
)

// The test binary is the scripted fake agent too (the benchmarks' harness).
// A queue that leaves a River goroutine running after Stop fails the
// package.
func TestMain(m *testing.M) {
	agenttest.MaybeRun()
	goleak.VerifyTestMain(m, leaktest.Global()...)
}
