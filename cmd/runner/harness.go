package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
)

// harnessConfigurer is the harness family's configurer for this
// deployment: the harness dir, the operator's overrides of built-in
// names, the providers whose images carry the harnesses, and the runner's
// own environment (read only for credentialMode runtime_provided).
func harnessConfigurer(cfg config.Config, environ []string, providers ...sandbox.Provider) runner.Configurer {
	o := harness.Options{Dir: cfg.HarnessDir, Overrides: map[string][]string{}, Images: map[string]string{}, Getenv: envLookup(environ)}
	for name, h := range cfg.Harnesses {
		if h.Custom {
			o.Overrides[name] = h.Command
		}
	}
	for _, p := range providers {
		if hi, ok := p.(sandbox.HarnessImage); ok {
			o.Images[p.Name()] = hi.HarnessPrefix()
		}
	}
	return harness.NewConfigurer(o)
}

// harnessBinds makes the harness dir visible, read-only, in every
// sandbox: by default it lies in the data dir, which bubblewrap hides. A
// bind must exist when a sandbox is created, so the dir is made here.
func harnessBinds(cfg config.Config, log *slog.Logger) []sandbox.Bind {
	if err := os.MkdirAll(cfg.HarnessDir, 0o755); err != nil {
		log.Warn("harness dir unavailable; installed harnesses cannot run in isolated sandboxes", logkey.Error, err)
		return nil
	}
	return []sandbox.Bind{{Path: cfg.HarnessDir}}
}

// harnessCmd is `runner harness install <name>…` and `runner harness list`.
func harnessCmd(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) int {
	help := "usage: runner harness install <name>… | runner harness install all | runner harness list [--json]\n" +
		"Harnesses install with npm, at pinned versions, into AGENTA_RUNNER_HARNESS_DIR (default <data dir>/harnesses).\n" +
		"Installable: " + strings.Join(harness.Names(), ", ") + "\n"
	if len(args) == 0 {
		fmt.Fprint(stderr, help)
		return 2
	}
	if wantsHelp(args[:1]) || (args[0] == "install" && wantsHelp(args[1:])) {
		fmt.Fprint(stdout, help)
		return 0
	}
	cfg, ok := loadConfig(environ, stderr)
	if !ok && !wantsHelp(args[1:]) {
		return 2
	}
	switch args[0] {
	case "install":
		names := args[1:]
		if len(names) == 0 {
			fmt.Fprintf(stderr, "runner harness install: name one or more of %s (or all)\n", strings.Join(harness.Names(), ", "))
			return 2
		}
		if len(names) == 1 && names[0] == "all" {
			names = harness.Names()
		}
		if err := harness.Install(ctx, cfg.HarnessDir, names, stderr); err != nil {
			fmt.Fprintln(stderr, "runner harness install:", err)
			return 1
		}
		return 0
	case "list":
		fs := flag.NewFlagSet("runner harness list", flag.ContinueOnError)
		fs.SetOutput(stderr)
		asJSON := fs.Bool("json", false, "print JSON")
		if code, ok := parseFlags(fs, args[1:], stdout); !ok {
			return code
		}
		list := harness.List(cfg.HarnessDir)
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(list)
			return 0
		}
		fmt.Fprintf(stdout, "harness dir: %s\n", cfg.HarnessDir)
		for _, in := range list {
			state := "not installed"
			if in.Installed {
				state = "installed"
			}
			if h, ok := cfg.Harnesses[in.Name]; ok && h.Custom {
				state += "; overridden by AGENTA_RUNNER_HARNESS_" + strings.ToUpper(in.Name) + ": " + strings.Join(h.Command, " ")
			}
			fmt.Fprintf(stdout, "%-10s %s\n", in.Name, state)
			for _, p := range in.Packages {
				have := p.Version
				if have == "" {
					have = "missing"
				}
				fmt.Fprintf(stdout, "  %s@%s (found: %s)\n", p.Name, p.Want, have)
			}
			if in.Installed {
				fmt.Fprintf(stdout, "  command: %s\n", strings.Join(in.Command, " "))
			} else {
				fmt.Fprintf(stdout, "  install: runner harness install %s\n", in.Name)
			}
		}
		return 0
	}
	fmt.Fprintf(stderr, "runner harness: unknown subcommand %q\n%s", args[0], help)
	return 2
}
