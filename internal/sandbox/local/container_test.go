package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fixture(t *testing.T, status, mountinfo, apparmor, userns string) hostFiles {
	t.Helper()
	dir := t.TempDir()
	f := hostFiles{
		status: filepath.Join(dir, "status"), mountinfo: filepath.Join(dir, "mountinfo"),
		apparmor: filepath.Join(dir, "apparmor"), userns: filepath.Join(dir, "userns"),
	}
	for path, body := range map[string]string{f.status: status, f.mountinfo: mountinfo, f.apparmor: apparmor, f.userns: userns} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

const dockerMounts = `600 599 0:50 / / rw,relatime - overlay overlay rw
601 600 0:53 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
610 601 0:53 /bus /proc/bus ro,relatime - proc proc rw
611 601 0:53 /sys /proc/sys ro,relatime - proc proc rw
612 601 0:55 / /proc/kcore rw,nosuid - tmpfs tmpfs rw
`

// TestContainerChecksNameTheMissingFlag: each cause of a failing
// bubblewrap in a container is reported with the one flag that fixes it,
// and a container started with the documented flags reports none.
func TestContainerChecksNameTheMissingFlag(t *testing.T) {
	clean := fixture(t, "Name:\trunner\nSeccomp:\t0\n", "601 600 0:53 / /proc rw - proc proc rw\n", "unconfined\n", "15000\n")
	if got := missingForBwrap(clean); len(got) != 0 {
		t.Fatalf("documented flags given, still reported missing: %q", got)
	}
	cases := []struct {
		name string
		f    hostFiles
		want string
	}{
		{"seccomp", fixture(t, "Seccomp:\t2\n", "", "", ""), "--security-opt seccomp=unconfined"},
		{"systempaths", fixture(t, "Seccomp:\t0\n", dockerMounts, "", ""), "--security-opt systempaths=unconfined"},
		{"apparmor", fixture(t, "Seccomp:\t0\n", "", "docker-default (enforce)\x00", ""), "--security-opt apparmor=unconfined"},
		{"userns", fixture(t, "Seccomp:\t0\n", "", "", "0\n"), "user.max_user_namespaces"},
	}
	for _, c := range cases {
		got := missingForBwrap(c.f)
		if len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("%s: %q, want exactly one item naming %s", c.name, got, c.want)
		}
	}
	all := fixture(t, "Seccomp:\t2\n", dockerMounts, "", "")
	err := bwrapUnavailable(errors.New("bwrap: setting up uid map: Permission denied"), all)
	for _, want := range []string{"seccomp=unconfined", "systempaths=unconfined", "/proc/bus, /proc/sys, /proc/kcore", "--privileged is not needed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "apparmor") {
		t.Errorf("error names apparmor, which is not the problem here: %v", err)
	}
}
