package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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

// daytonaCommand is `runner daytona snapshot build …`.
type daytonaCommand struct{ stdio }

func (c daytonaCommand) run(ctx context.Context, args []string) int {
	if len(args) < 2 || args[0] != "snapshot" || args[1] != "build" {
		if wantsHelp(args) {
			fmt.Fprint(c.stdout, daytonaHelp)
			return 0
		}
		fmt.Fprint(c.stderr, daytonaHelp)
		return 2
	}
	fs := flag.NewFlagSet("runner daytona snapshot build", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	name := fs.String("name", "", "snapshot name (default DAYTONA_SNAPSHOT, else "+daytona.DefaultSnapshot+")")
	base := fs.String("base", daytona.DefaultBaseImage, "base image with Node.js 20+ and npm, tagged (not latest)")
	harnesses := fs.String("harness", "all", "comma-separated harnesses to install ("+strings.Join(harness.Names(), ", ")+") or all")
	wait := fs.Bool("wait", true, "wait until the snapshot is active")
	cpu := fs.Int("cpu", 2, "vCPUs of sandboxes made from the snapshot")
	memory := fs.Int("memory", 4, "memory (GB) of sandboxes made from the snapshot")
	disk := fs.Int("disk", 5, "disk (GB) of sandboxes made from the snapshot")
	timeout := fs.Duration("timeout", 30*time.Minute, "how long to wait for the build")
	if code, ok := parseFlags(fs, args[2:], c.stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "runner daytona snapshot build: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, ok := loadConfig(c.environ, c.stderr)
	if !ok {
		return 2
	}
	images, err := harness.ImageInstalls(strings.Split(*harnesses, ","))
	if err != nil {
		fmt.Fprintln(c.stderr, "runner daytona snapshot build:", err)
		return 2
	}
	var installs []daytona.SnapshotInstall
	for _, in := range images {
		installs = append(installs, daytona.SnapshotInstall(in))
	}
	if *name == "" {
		*name = cfg.Daytona.Snapshot
	}
	log := newLogger(c.stderr, cfg.LogLevel)
	b, err := daytona.NewSnapshots(daytona.Config{APIKey: cfg.Daytona.APIKey, APIURL: cfg.Daytona.APIURL}, log)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner daytona snapshot build:", err)
		return 2
	}
	snap, err := b.Build(ctx, daytona.SnapshotSpec{
		Name: *name, Base: *base, Installs: installs,
		CPU: *cpu, MemoryGB: *memory, DiskGB: *disk, Wait: *wait, Timeout: *timeout,
	})
	if err != nil {
		fmt.Fprintln(c.stderr, "runner daytona snapshot build:", err)
		if errors.Is(err, errdefs.ErrInvalid) {
			return 2
		}
		return 1
	}
	if snap.Existing {
		fmt.Fprintf(c.stderr, "runner daytona snapshot build: snapshot %s exists already (state %s); kept it, built nothing\n", snap.Name, snap.State)
		if snap.Differs {
			fmt.Fprintf(c.stderr, "runner daytona snapshot build: warning: its Dockerfile is not this build's (other harnesses or versions); build under a new --name and set DAYTONA_SNAPSHOT to it\n")
		}
	} else if snap.State != "active" {
		fmt.Fprintf(c.stderr, "runner daytona snapshot build: snapshot %s is %s; not waiting (--wait=false)\n", snap.Name, snap.State)
	}
	fmt.Fprintln(c.stdout, snap.Name)
	return 0
}
