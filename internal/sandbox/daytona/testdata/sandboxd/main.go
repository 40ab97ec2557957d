// Command sandboxd is the daemon alone, for the test against real
// Daytona: built static for linux/amd64 and uploaded like the runner
// binary, it answers to `sandboxd …` as `runner sandboxd …` does.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentrunner/runner/internal/sandboxd"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "sandboxd" {
		fmt.Fprintln(os.Stderr, "usage: sandboxd sandboxd [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := sandboxd.Main(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
