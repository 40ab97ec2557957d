package local_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
)

// TestUnconfinedHarnessTakesItsChildrenAlong: with isolation none (no PID
// namespace) what a harness forked ends with it. The harness here forks a
// child that keeps writing into the sandbox's home, then waits for its
// stdin; it either exits on stdin's end while the child runs on (as
// claude-agent-acp leaves its Claude CLI, and the CLI its `auth status`
// run), or is still running when its sandbox is destroyed. Either way,
// once the process's Wait (or Destroy) returned, the writer is dead.
func TestUnconfinedHarnessTakesItsChildrenAlong(t *testing.T) {
	p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationNone, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	const script = `sh -c 'echo $$; while :; do echo x >>"$HOME/out"; sleep 0.01; done' & read _`
	for _, end := range []string{"exits", "destroyed"} {
		t.Run(end, func(t *testing.T) {
			sb, err := p.Create(t.Context(), sandbox.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(context.WithoutCancel(t.Context()))
			proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "sh", Args: []string{"-c", script}, Env: []string{"PATH=" + os.Getenv("PATH")}})
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(proc.Stdout()).ReadString('\n')
			if err != nil {
				t.Fatalf("the writer's pid: %v", err)
			}
			writer, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil {
				t.Fatalf("the writer's pid: %q", line)
			}
			if !alive(writer) {
				t.Fatalf("the writer %d is not running", writer)
			}
			switch end {
			case "exits":
				_ = proc.Stdin().Close()
				_ = proc.Wait()
			case "destroyed":
				if err := sb.Destroy(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			if alive(writer) {
				t.Errorf("the harness's child %d still runs after the harness %s", writer, end)
			}
		})
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
