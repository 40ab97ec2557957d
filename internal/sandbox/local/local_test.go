package local_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/leaktest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
	"go.uber.org/goleak"
)

// TestMain lets the test binary serve as the allowlist proxy bridge, the
// way the runner binary does in production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		if os.Args[1] == "proxy-bridge" {
			os.Exit(local.ProxyBridgeMain(os.Args[2:]))
		}
		if os.Args[1] == local.NetSetupCommand {
			os.Exit(local.NetSetupMain())
		}
		if h, ok := helpers[os.Args[1]]; ok {
			os.Exit(h(os.Args[2:]))
		}
	}
	if n := local.DetachStaleDisks(os.TempDir()); n > 0 {
		fmt.Fprintf(os.Stderr, "local: detached %d sandbox disks killed tests left under %s\n", n, os.TempDir())
	}
	goleak.VerifyTestMain(m, leaktest.Global()...)
}

func logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// needBwrap skips without bubblewrap, unless RUNNER_TEST_BWRAP=1 says the
// environment must have it (CI).
func needBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("RUNNER_TEST_BWRAP") == "1" {
			t.Fatalf("RUNNER_TEST_BWRAP=1 but: %v", err)
		}
		t.Skip("bubblewrap not installed; set RUNNER_TEST_BWRAP=1 to require it")
	}
}

// needLimits skips a test of cgroup limits where the runner cannot make
// cgroups (not root).
func needLimits(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroup limits need root here")
	}
}

// newBwrap returns a bwrap provider whose data dir is a fresh temp dir.
func newBwrap(t testing.TB, mod func(*local.Config)) *local.Provider {
	t.Helper()
	needBwrap(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	cfg := local.Config{
		Dir:         filepath.Join(data, "sandboxes"),
		DataDir:     data,
		Isolation:   local.IsolationBwrap,
		ProxyBridge: []string{exe, "proxy-bridge"},
		Logger:      logger(t),
	}
	if os.Geteuid() != 0 {
		// Without root there is usually no cgroup to write; the limit
		// tests ask for limits themselves and skip (needLimits); nor can
		// it mount disk images.
		cfg.MemoryMB, cfg.Pids, cfg.CPUs, cfg.DiskMB = local.NoLimit, local.NoLimit, local.NoLimit, local.NoLimit
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := local.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func TestConformanceNone(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Provider {
		p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationNone, Logger: logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

func TestConformanceBwrap(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Provider { return newBwrap(t, nil) })
}

func TestDescribe(t *testing.T) {
	p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationNone})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"isolation": "none"}, p.Describe()); diff != "" {
		t.Errorf("Describe (-want +got):\n%s", diff)
	}
	b := newBwrap(t, nil)
	d := b.Describe()
	if d["isolation"] != "bwrap" || d["seccomp"] != true {
		t.Errorf("Describe = %v, want isolation bwrap with seccomp", d)
	}
}

func TestNewRefusesUnusableBwrap(t *testing.T) {
	_, err := local.New(local.Config{Dir: t.TempDir(), Bwrap: "/nonexistent/bwrap"})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("New = %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"bubblewrap", "AGENTA_RUNNER_LOCAL_ISOLATION=none"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestNewRejectsUnknownIsolation(t *testing.T) {
	_, err := local.New(local.Config{Dir: t.TempDir(), Isolation: "docker"})
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("New = %v, want ErrInvalid", err)
	}
}

func TestNoneRefusesPolicies(t *testing.T) {
	p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationNone})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []sandbox.Spec{{Network: sandbox.Network{Mode: "off"}}, {ReadOnly: true}} {
		if _, err := p.Create(t.Context(), spec); !errors.Is(err, errdefs.ErrUnprocessable) {
			t.Errorf("Create(%+v) = %v, want ErrUnprocessable", spec, err)
		}
	}
}

// newRunAs returns a bwrap provider whose sandboxes run as nobody.
func newRunAs(t testing.TB) *local.Provider {
	t.Helper()
	return newRunAsWith(t, func(*local.Config) {})
}

// newRunAsWith is newRunAs with mod applied to its config.
func newRunAsWith(t testing.TB, mod func(*local.Config)) *local.Provider {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a sandbox uid needs root")
	}
	return newBwrap(t, func(c *local.Config) {
		c.SandboxUID, c.SandboxGID = 65534, 65534
		mod(c)
	})
}

func TestConformanceBwrapRunAs(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Provider { return newRunAs(t) })
}

// A binary the provider ran again as its network installer, whose main
// did not dispatch NetSetupCommand, must not go on to start sandboxes of
// its own inside the sandbox's network namespace.
func TestNewRefusesInAnUndispatchedInstaller(t *testing.T) {
	t.Setenv("AGENTA_RUNNER_INTERNAL_NET_SETUP", "1")
	_, err := local.New(local.Config{Dir: t.TempDir(), Isolation: local.IsolationNone})
	if err == nil || !strings.Contains(err.Error(), local.NetSetupCommand) {
		t.Fatalf("New in an installer's environment: %v, want a refusal naming %s", err, local.NetSetupCommand)
	}
}
