package main

import (
	"context"
	"fmt"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// versionCommand is `runner version`.
type versionCommand struct{ stdio }

func (c versionCommand) run(context.Context, []string) int {
	fmt.Fprintln(c.stdout, "runner", version)
	return 0
}
