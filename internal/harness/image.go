package harness

import (
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
)

// ImageInstall is one npm prefix of a sandbox image that has the built-in
// harnesses installed (a Daytona snapshot), <prefix>/Dir.
type ImageInstall struct {
	Dir string
	// Packages are name@version, installed together at exact versions.
	Packages []string
	// Bins are npm bins that must exist after the install (ImageCommand
	// starts them).
	Bins []string
}

// ImageInstalls maps harness names (or "all") to the npm prefixes an
// image installs, one per catalogue Dir (pi_core and pi_agenta share
// one), with the bins ImageCommand starts.
func ImageInstalls(names []string) ([]ImageInstall, error) {
	if len(names) == 1 && strings.TrimSpace(names[0]) == "all" {
		names = Names()
	}
	var out []ImageInstall
	index := map[string]int{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		h, ok := Lookup(n)
		if !ok {
			return nil, errdefs.Invalidf("unknown harness %q (built-in: %s)", n, strings.Join(Names(), ", "))
		}
		i, seen := index[h.Dir]
		if !seen {
			in := ImageInstall{Dir: h.Dir}
			for _, p := range h.Packages {
				in.Packages = append(in.Packages, p.String())
			}
			if h.Dir == "pi" {
				in.Bins = append(in.Bins, "pi") // PI_ACP_PI_COMMAND
			}
			i = len(out)
			index[h.Dir] = i
			out = append(out, in)
		}
		if !slices.Contains(out[i].Bins, h.Bin) {
			out[i].Bins = append(out[i].Bins, h.Bin)
		}
	}
	if len(out) == 0 {
		return nil, errdefs.Invalidf("no harness named; list one or more of %s, or all", strings.Join(Names(), ", "))
	}
	return out, nil
}

// ImageCommand is where a built-in harness's ACP agent is inside a
// sandbox whose image ImageInstalls laid out under prefix: the command
// line, and the environment its launch needs (as Resolve returns them for
// the local harness dir). It reads no file: the image build checked the
// bins exist.
func ImageCommand(prefix, name string) (argv []string, env map[string]string, err error) {
	h, ok := Lookup(name)
	if !ok {
		return nil, nil, errdefs.Unprocessablef("unknown harness %q (built-in: %s)", name, strings.Join(Names(), ", "))
	}
	bin := func(dir, b string) string { return prefix + "/" + dir + "/node_modules/.bin/" + b }
	argv = append([]string{bin(h.Dir, h.Bin)}, h.Args...)
	if h.Dir == "pi" {
		env = map[string]string{"PI_ACP_PI_COMMAND": bin("pi", "pi")}
	}
	return argv, env, nil
}
