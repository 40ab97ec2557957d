package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/agentrunner/runner/internal/config"
)

// wantsHelp reports whether args ask for help (-h, -help or --help before
// any "--"): such a call prints the subcommand's usage and exits 0.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// parseFlags parses a subcommand's flags. On -h/--help it prints the
// usage and flags to stdout and returns ok=false with code 0, so that
// asking for help is not an error; a bad flag returns code 2.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	if wantsHelp(args) {
		fs.SetOutput(stdout)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

// flaglessHelp answers --help for the subcommands that take no flags.
var flaglessHelp = map[string]string{
	"serve": "usage: runner serve\n\nRuns the HTTP service. It takes no flags: it is configured with\n" +
		"environment variables (AGENTA_RUNNER_TOKEN is required; see docs/configuration.md),\n" +
		"by component:\n",
	"version":              "usage: runner version\n\nPrints the version.\n",
	"channel-forward":      "usage: runner channel-forward LISTEN NAME\n\n(inside a remote sandbox) splices LISTEN to the runner's channel NAME.\n",
	"sandbox-proxy-bridge": "usage: runner sandbox-proxy-bridge SOCKET LISTEN [--forward HOST:PORT]… -- COMMAND [ARG…]\n\n(inside a local sandbox) bridges the harness's proxy port to the runner's proxy socket.\n",
}

func printFlaglessHelp(name string, stdout io.Writer) bool {
	h, ok := flaglessHelp[name]
	if ok {
		fmt.Fprint(stdout, h)
	}
	if name == "serve" {
		config.WriteHelp(stdout)
	}
	return ok
}
