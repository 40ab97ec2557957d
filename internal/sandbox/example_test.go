package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentrunner/runner/internal/sandbox"
)

// How the runner uses any provider: create a sandbox, write a file into
// its workspace, run a command with a complete environment (nothing is
// inherited), read its output, and release the sandbox: parked when the
// provider can pause it (an optional ability, found by assertion),
// destroyed otherwise. internal/sandbox/local has a runnable example with
// the local provider.
func Example() {
	run := func(ctx context.Context, p sandbox.Provider) error {
		sb, err := p.Create(ctx, sandbox.Spec{SessionID: "s1", ProjectID: "p1"})
		if err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
		defer func() {
			// Teardown outlives a cancelled caller.
			ctx := context.WithoutCancel(ctx)
			if pz, ok := sb.(sandbox.Pauser); ok && pz.Pause(ctx) == nil {
				return
			}
			sb.Destroy(ctx)
		}()
		info := sb.Info()
		if err := sb.WriteFile(ctx, info.Workdir+"/hello.txt", []byte("hello\n"), 0o644); err != nil {
			return err
		}
		proc, err := sb.Start(ctx, sandbox.Cmd{Path: "cat", Args: []string{"hello.txt"}, Env: []string{"PATH=/usr/bin:/bin", "HOME=" + info.Home}})
		if err != nil {
			return err
		}
		out, _ := io.ReadAll(proc.Stdout())
		if err := proc.Wait(); err != nil {
			var exit *sandbox.ExitError
			if errors.As(err, &exit) {
				return fmt.Errorf("cat exited %d: %s", exit.Code, proc.StderrTail())
			}
			return err
		}
		fmt.Print(string(out))
		return nil
	}
	_ = run // given a provider: run(ctx, provider)
}
