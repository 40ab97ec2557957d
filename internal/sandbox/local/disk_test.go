package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// TestDiskQuota: a sandbox writing past its disk quota gets ENOSPC in its
// workspace, $HOME and /tmp alike, the data dir's filesystem does not
// take what it wrote beyond the quota, and the sandbox's files survive in
// its state for the next sandbox of that key, while Destroy of a sandbox
// without a key leaves nothing mounted.
func TestDiskQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a disk quota: skipped under -short")
	}
	needLimits(t)
	p := newBwrap(t, func(c *local.Config) { c.DiskMB = 20 })
	spec := sandbox.Spec{StateKey: "p:s"}
	sb := createSpec(t, p, spec)
	for _, dir := range []string{sb.Info().Workdir, sb.Info().Home, "/tmp"} {
		out, _ := sandboxtest.Sh(t, sb, "dd if=/dev/zero of="+dir+"/big bs=1M count=40 2>&1; rm -f "+dir+"/big")
		if !strings.Contains(out, "No space left on device") {
			t.Errorf("40 MB into %s under a 20 MB quota: %s", dir, out)
		}
	}
	if _, err := sandboxtest.Sh(t, sb, "echo kept > "+sb.Info().Workdir+"/note"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	next := createSpec(t, p, spec)
	if out, err := sandboxtest.Sh(t, next, "cat "+next.Info().Workdir+"/note"); err != nil || out != "kept\n" {
		t.Errorf("the next sandbox of the key: %q, %v", out, err)
	}

	plain := createSpec(t, p, sandbox.Spec{})
	root := filepath.Dir(filepath.Dir(plain.Info().Workdir))
	if err := plain.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox root %s left behind: %v", root, err)
	}
	if mounted(t, root) {
		t.Errorf("%s still mounted after Destroy", root)
	}
}

func mounted(t *testing.T, under string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), " "+under)
}

// TestDiskSweepSparesLiveDisks: a second provider on the same dir (`runner
// run` beside a service) sweeps only the disks a dead runner left: the
// first provider's live sandbox keeps its mounted disk, and its files.
func TestDiskSweepSparesLiveDisks(t *testing.T) {
	needLimits(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	cfg := local.Config{Dir: filepath.Join(data, "sandboxes"), DataDir: data, DiskMB: 20, ProxyBridge: []string{exe, "proxy-bridge"}, Logger: logger(t)}
	first, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sb := createSpec(t, first, sandbox.Spec{StateKey: "p:live"})
	if _, err := sandboxtest.Sh(t, sb, "echo live > "+sb.Info().Workdir+"/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := local.New(cfg); err != nil {
		t.Fatal(err)
	}
	if !mounted(t, filepath.Dir(sb.Info().Workdir)) {
		t.Fatalf("the live sandbox's disk was unmounted by the second provider's sweep")
	}
	// Read from the host: the second provider also removes the first's
	// cgroups (same instance name), which is another matter.
	if b, err := os.ReadFile(filepath.Join(sb.Info().Workdir, "f")); err != nil || string(b) != "live\n" {
		t.Errorf("the live sandbox's file: %q, %v", b, err)
	}
}
