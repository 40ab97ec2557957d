// Command fakeagent is the scripted test agent (package agenttest) as a
// program of its own, for places the test binary cannot be re-executed:
// the container CI runs a real turn with it inside the runner image.
package main

import (
	"os"

	"github.com/agentrunner/runner/internal/agent/agenttest"
)

func main() { os.Exit(agenttest.Run(os.Stdin, os.Stdout)) }
