package local_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
)

// The local provider without isolation (a plain host process in its own
// directory) needs no privileges; with Isolation "bwrap" the same calls run
// inside bubblewrap.
func Example() {
	dir, err := os.MkdirTemp("", "sandboxes")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p, err := local.New(local.Config{Dir: dir, Isolation: local.IsolationNone})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	sb, err := p.Create(ctx, sandbox.Spec{SessionID: "s1"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))

	info := sb.Info()
	if err := sb.WriteFile(ctx, info.Workdir+"/hello.txt", []byte("hello from the sandbox\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	proc, err := sb.Start(ctx, sandbox.Cmd{Path: "cat", Args: []string{"hello.txt"}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		log.Fatal(err)
	}
	out, _ := io.ReadAll(proc.Stdout())
	if err := proc.Wait(); err != nil {
		log.Fatal(err)
	}
	fmt.Print(info.Provider, " ", info.Isolation, ": ", string(out))
	// Output: local none: hello from the sandbox
}
