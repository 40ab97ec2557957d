package local_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// TestStartAgainAfterAHostMountVanished: bwrap binds the host's whole /
// and then remounts every mount it listed read-only; a mount another
// sandbox (or anything on the host) unmounts in between makes that
// remount fail, and bwrap exits before running anything. Seen under load
// with the per-sandbox disks of concurrent tests:
//
//	bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags:
//	remount "/newroot/tmp/…/sandboxes/local-…/disk": No such file or directory
//
// The window is microseconds wide, so the test plays that bwrap: a
// wrapper fails the first sandbox setup (New's probe of bwrap) with that
// message and runs the real bwrap after. Before the retry, New refused
// the host ("bwrap does not work"), so a runner booting beside another
// one's teardown could fail to start, and a turn could fail the same way.
// What must hold: New and the command start, nothing of the lost race
// reaches the caller.
func TestStartAgainAfterAHostMountVanished(t *testing.T) {
	needBwrap(t)
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	raced, wrapper := filepath.Join(dir, "raced"), filepath.Join(dir, "bwrap")
	script := `#!/bin/sh
case " $* " in
*" --args "*)
	if [ ! -e '` + raced + `' ]; then
		: > '` + raced + `'
		echo 'bwrap: Can'"'"'t bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/tmp/x/sandboxes/local-0/disk": No such file or directory' >&2
		exit 1
	fi;;
esac
exec '` + real + `' "$@"
`
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := newBwrap(t, func(c *local.Config) { c.Bwrap = wrapper })
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(t.Context()) })
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/echo", Args: []string{"started"}, Env: sandboxtest.Env(sb)})
	if err != nil {
		t.Fatalf("Start after a lost mount race: %v", err)
	}
	out, _ := io.ReadAll(proc.Stdout())
	if err := proc.Wait(); err != nil || strings.TrimSpace(string(out)) != "started" {
		t.Fatalf("the command after the retry: %q, %v", out, err)
	}
	if _, err := os.Stat(raced); err != nil {
		t.Fatalf("the wrapper never played the lost race, so nothing was tested: %v", err)
	}
}
