// Package agenttest is a scripted fake ACP agent: a real separate process
// speaking ACP over stdio, made by re-executing the test binary. A test
// package calls MaybeRun from TestMain and uses Command as the harness's
// command line.
//
// The agent's behaviour for a turn is the prompt text itself, one
// directive per line (see Directives); a prompt whose first word is not a
// directive is echoed back as "echo: <text>". Sessions are stored as files
// under $HOME/.fakeagent/<key of the cwd>, as Claude Code keeps them, so
// session/load works across processes in the same working directory.
package agenttest

import (
	"os"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/jsonrpc"
)

// StateDir is the fake agent's state directory under $HOME
// (agent.Spec.StateDirs).
const StateDir = ".fakeagent"

// KeyedDirs are the fake agent's directories named after the working
// directory, for agent.Spec.KeyedDirs.
func KeyedDirs() []agent.KeyedDir {
	return []agent.KeyedDir{{Dir: StateDir, Key: harness.ClaudeProjectKey}}
}

// Arg is the argument that turns the test binary into the fake agent.
const Arg = "__fake_acp_agent__"

// MaybeRun runs the fake agent and exits when the process was started as
// one; otherwise it returns. Call it first in TestMain.
func MaybeRun() {
	if len(os.Args) > 1 && os.Args[1] == Arg {
		os.Exit(Run(os.Stdin, os.Stdout))
	}
}

// Command is the command line that starts the fake agent.
func Command() []string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return []string{exe, Arg}
}

// Run serves ACP on in/out until in ends and returns the exit code.
func Run(in *os.File, out *os.File) int {
	a := &fakeAgent{sessions: map[string]*session{}, ready: make(chan struct{})}
	conn := jsonrpc.New(in, out, jsonrpc.HandlerFunc(a.handle))
	a.conn = conn
	close(a.ready)
	<-conn.Done()
	a.cancelAll()
	conn.Close()
	return 0
}
