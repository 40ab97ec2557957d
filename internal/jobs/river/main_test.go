package river

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/leaktest"
)

// A queue that leaves a River goroutine running after Stop fails the package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Global()...)
}
