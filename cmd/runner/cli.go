package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mattn/go-isatty"

	"github.com/agentrunner/runner/internal/config"
)

// The helpers every command shares: the configuration, the environment,
// the terminal.

func loadConfig(environ []string, stderr io.Writer) (config.Config, bool) {
	cfg, warnings, err := config.Load(environ)
	if err != nil {
		fmt.Fprintf(stderr, "runner: invalid configuration:\n%s\n", indent(err.Error()))
		return cfg, false
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "runner: warning:", w)
	}
	return cfg, true
}

func indent(s string) string {
	out := "  - "
	for _, r := range s {
		out += string(r)
		if r == '\n' {
			out += "  - "
		}
	}
	return out
}

func envLookup(environ []string) func(string) string {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	// Not a mode check: /dev/null is a character device too.
	return isatty.IsTerminal(f.Fd())
}
