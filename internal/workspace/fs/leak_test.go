package fs_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentrunner/runner/internal/leaktest"
)

// TestMain fails the package's tests when one leaves a goroutine running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.Global()...) }
