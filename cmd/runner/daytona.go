package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
)

const daytonaHelp = `usage: runner daytona snapshot build [flags]

Builds the Daytona snapshot the daytona provider makes sandboxes from: a
Node.js 20 base image with the listed harness adapters installed at their
pinned versions under ` + daytona.HarnessPrefix + `/<dir>. The runner binary is not
baked in: the provider uploads it into each sandbox. Prints the snapshot
name; set DAYTONA_SNAPSHOT to it when it is not the default.
Needs DAYTONA_API_KEY (and DAYTONA_API_URL for a self-hosted Daytona).
`

// daytonaCmd is `runner daytona snapshot build …`.
func daytonaCmd(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "snapshot" || args[1] != "build" {
		if wantsHelp(args) {
			fmt.Fprint(stdout, daytonaHelp)
			return 0
		}
		fmt.Fprint(stderr, daytonaHelp)
		return 2
	}
	fs := flag.NewFlagSet("runner daytona snapshot build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "snapshot name (default DAYTONA_SNAPSHOT, else "+daytona.DefaultSnapshot+")")
	base := fs.String("base", daytona.DefaultBaseImage, "base image with Node.js 20+ and npm, tagged (not latest)")
	harnesses := fs.String("harness", "all", "comma-separated harnesses to install ("+strings.Join(harness.Names(), ", ")+") or all")
	wait := fs.Bool("wait", true, "wait until the snapshot is active")
	cpu := fs.Int("cpu", 2, "vCPUs of sandboxes made from the snapshot")
	memory := fs.Int("memory", 4, "memory (GB) of sandboxes made from the snapshot")
	disk := fs.Int("disk", 5, "disk (GB) of sandboxes made from the snapshot")
	timeout := fs.Duration("timeout", 30*time.Minute, "how long to wait for the build")
	if code, ok := parseFlags(fs, args[2:], stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "runner daytona snapshot build: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, ok := loadConfig(environ, stderr)
	if !ok {
		return 2
	}
	installs, err := snapshotInstalls(strings.Split(*harnesses, ","))
	if err != nil {
		fmt.Fprintln(stderr, "runner daytona snapshot build:", err)
		return 2
	}
	if *name == "" {
		*name = cfg.Daytona.Snapshot
	}
	log := newLogger(stderr, cfg.LogLevel)
	b, err := daytona.NewSnapshots(daytona.Config{APIKey: cfg.Daytona.APIKey, APIURL: cfg.Daytona.APIURL}, log)
	if err != nil {
		fmt.Fprintln(stderr, "runner daytona snapshot build:", err)
		return 2
	}
	snap, err := b.Build(ctx, daytona.SnapshotSpec{
		Name: *name, Base: *base, Installs: installs,
		CPU: *cpu, MemoryGB: *memory, DiskGB: *disk, Wait: *wait, Timeout: *timeout,
	})
	if err != nil {
		fmt.Fprintln(stderr, "runner daytona snapshot build:", err)
		if errors.Is(err, errdefs.ErrInvalid) {
			return 2
		}
		return 1
	}
	if snap.Existing {
		fmt.Fprintf(stderr, "runner daytona snapshot build: snapshot %s exists already (state %s); kept it, built nothing\n", snap.Name, snap.State)
		if snap.Differs {
			fmt.Fprintf(stderr, "runner daytona snapshot build: warning: its Dockerfile is not this build's (other harnesses or versions); build under a new --name and set DAYTONA_SNAPSHOT to it\n")
		}
	} else if snap.State != "active" {
		fmt.Fprintf(stderr, "runner daytona snapshot build: snapshot %s is %s; not waiting (--wait=false)\n", snap.Name, snap.State)
	}
	fmt.Fprintln(stdout, snap.Name)
	return 0
}

// snapshotInstalls maps harness names to the npm prefixes a snapshot
// installs, one per catalogue Dir (pi_core and pi_agenta share one), with
// the bins daytonaHarnessCommand starts.
func snapshotInstalls(names []string) ([]daytona.SnapshotInstall, error) {
	if len(names) == 1 && strings.TrimSpace(names[0]) == "all" {
		names = harness.Names()
	}
	var out []daytona.SnapshotInstall
	index := map[string]int{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		h, ok := harness.Lookup(n)
		if !ok {
			return nil, errdefs.Invalidf("unknown harness %q (built-in: %s)", n, strings.Join(harness.Names(), ", "))
		}
		i, seen := index[h.Dir]
		if !seen {
			in := daytona.SnapshotInstall{Dir: h.Dir}
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
		return nil, errdefs.Invalidf("no harness named; list one or more of %s, or all", strings.Join(harness.Names(), ", "))
	}
	return out, nil
}

// daytonaHarnessCommand is where a built-in harness's ACP agent is inside a
// sandbox made from a snapshot that `runner daytona snapshot build` built:
// the command line, and the environment its launch needs (as
// harness.Resolve returns them for the local harness dir). It reads no
// file: the snapshot build checked the bins exist.
func daytonaHarnessCommand(name string) (argv []string, env map[string]string, err error) {
	h, ok := harness.Lookup(name)
	if !ok {
		return nil, nil, errdefs.Unprocessablef("unknown harness %q (built-in: %s)", name, strings.Join(harness.Names(), ", "))
	}
	bin := func(dir, b string) string { return daytona.HarnessPrefix + "/" + dir + "/node_modules/.bin/" + b }
	argv = append([]string{bin(h.Dir, h.Bin)}, h.Args...)
	if h.Dir == "pi" {
		env = map[string]string{"PI_ACP_PI_COMMAND": bin("pi", "pi")}
	}
	return argv, env, nil
}
