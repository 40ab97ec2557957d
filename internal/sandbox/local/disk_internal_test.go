package local

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
)

// TestDiskReserve: once the sandboxes' disks, filled, could take the space
// the store needs, Create refuses with ErrUnavailable naming the settings.
// The filesystem's free space is fixed by the test; what a mounted disk
// may still grow by is real.
func TestDiskReserve(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs bubblewrap and root")
	}
	p, err := New(Config{Dir: t.TempDir(), DiskMB: 20, ReserveMB: 70})
	if err != nil {
		t.Fatal(err)
	}
	p.disk.free = func(string) (int64, error) { return 100 << 20, nil }
	// 100 MB free less 20 for the first disk leaves the reserve of 70.
	first, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatalf("first sandbox: %v", err)
	}
	t.Cleanup(func() { _ = first.Destroy(t.Context()) })
	// The first disk may still grow by most of its 20 MB: no room.
	_, err = p.Create(t.Context(), sandbox.Spec{})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("second sandbox: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"AGENTA_RUNNER_DISK_RESERVE_MB", "AGENTA_RUNNER_LOCAL_DISK_MB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if err := first.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if sb, err := p.Create(t.Context(), sandbox.Spec{}); err != nil {
		t.Errorf("after the first sandbox ended: %v", err)
	} else {
		_ = sb.Destroy(t.Context())
	}
}
