package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/agentrunner/runner/internal/harness"
)

// harnessCommand is `runner harness install <name>…` and `runner harness list`.
type harnessCommand struct{ stdio }

func (c harnessCommand) run(ctx context.Context, args []string) int {
	help := "usage: runner harness install <name>… | runner harness install all | runner harness list [--json]\n" +
		"Harnesses install with npm, at pinned versions, into AGENTA_RUNNER_HARNESS_DIR (default <data dir>/harnesses).\n" +
		"Installable: " + strings.Join(harness.Names(), ", ") + "\n"
	if len(args) == 0 {
		fmt.Fprint(c.stderr, help)
		return 2
	}
	if wantsHelp(args[:1]) || (args[0] == "install" && wantsHelp(args[1:])) {
		fmt.Fprint(c.stdout, help)
		return 0
	}
	cfg, ok := loadConfig(c.environ, c.stderr)
	if !ok && !wantsHelp(args[1:]) {
		return 2
	}
	switch args[0] {
	case "install":
		names := args[1:]
		if len(names) == 0 {
			fmt.Fprintf(c.stderr, "runner harness install: name one or more of %s (or all)\n", strings.Join(harness.Names(), ", "))
			return 2
		}
		if len(names) == 1 && names[0] == "all" {
			names = harness.Names()
		}
		if err := harness.Install(ctx, cfg.HarnessDir, names, c.stderr); err != nil {
			fmt.Fprintln(c.stderr, "runner harness install:", err)
			return 1
		}
		return 0
	case "list":
		fs := flag.NewFlagSet("runner harness list", flag.ContinueOnError)
		fs.SetOutput(c.stderr)
		asJSON := fs.Bool("json", false, "print JSON")
		if code, ok := parseFlags(fs, args[1:], c.stdout); !ok {
			return code
		}
		list := harness.List(cfg.HarnessDir)
		if *asJSON {
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(list)
			return 0
		}
		fmt.Fprintf(c.stdout, "harness dir: %s\n", cfg.HarnessDir)
		for _, in := range list {
			state := "not installed"
			if in.Installed {
				state = "installed"
			}
			if h, ok := cfg.Harnesses[in.Name]; ok {
				state += "; overridden by AGENTA_RUNNER_HARNESS_" + strings.ToUpper(in.Name) + ": " + strings.Join(h.Command, " ")
			}
			fmt.Fprintf(c.stdout, "%-10s %s\n", in.Name, state)
			for _, p := range in.Packages {
				have := p.Version
				if have == "" {
					have = "missing"
				}
				fmt.Fprintf(c.stdout, "  %s@%s (found: %s)\n", p.Name, p.Want, have)
			}
			if in.Installed {
				fmt.Fprintf(c.stdout, "  command: %s\n", strings.Join(in.Command, " "))
			} else {
				fmt.Fprintf(c.stdout, "  install: runner harness install %s\n", in.Name)
			}
		}
		return 0
	}
	fmt.Fprintf(c.stderr, "runner harness: unknown subcommand %q\n%s", args[0], help)
	return 2
}
