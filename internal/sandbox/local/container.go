package local

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
)

// hostFiles is where the container checks read the kernel's view of this
// process; tests point it at fixtures.
type hostFiles struct {
	status, mountinfo, apparmor, userns string
}

var procFiles = hostFiles{
	status:    "/proc/self/status",
	mountinfo: "/proc/self/mountinfo",
	apparmor:  "/proc/self/attr/current",
	userns:    "/proc/sys/user/max_user_namespaces",
}

// missingForBwrap names, one per item, exactly what keeps bubblewrap from
// working in this container and the flag that fixes it: a seccomp filter
// (Docker's default profile refuses the namespace system calls), an
// AppArmor profile in enforce mode (it refuses mount), /proc partly
// masked (the kernel then refuses a fresh /proc), user namespaces off.
// Empty when none of these is the cause.
func missingForBwrap(f hostFiles) []string {
	var out []string
	if b, err := os.ReadFile(f.status); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Seccomp:"); ok && strings.TrimSpace(v) != "0" {
				out = append(out, "a seccomp filter is active (Seccomp: "+strings.TrimSpace(v)+" in /proc/self/status): run the container with --security-opt seccomp=unconfined (Kubernetes: securityContext.seccompProfile.type: Unconfined)")
			}
		}
	}
	if b, err := os.ReadFile(f.apparmor); err == nil {
		if p := strings.TrimSpace(strings.TrimRight(string(b), "\x00")); p != "" && p != "unconfined" && strings.Contains(p, "(enforce)") {
			out = append(out, "the AppArmor profile "+strconv.Quote(p)+" is enforced: run the container with --security-opt apparmor=unconfined (Kubernetes: securityContext.appArmorProfile.type: Unconfined)")
		}
	}
	if masked := maskedProc(f.mountinfo); len(masked) > 0 {
		out = append(out, "/proc is partly masked ("+strings.Join(masked, ", ")+"), so the kernel refuses a new /proc: run the container with --security-opt systempaths=unconfined (Kubernetes: securityContext.procMount: Unmasked, which needs hostUsers: false)")
	}
	if b, err := os.ReadFile(f.userns); err == nil && strings.TrimSpace(string(b)) == "0" {
		out = append(out, "user namespaces are off (/proc/sys/user/max_user_namespaces is 0): set the sysctl user.max_user_namespaces above 0 on the host")
	}
	return out
}

// maskedProc lists the mounts over paths inside /proc (what Docker's
// masked and read-only system paths are), at most four.
func maskedProc(mountinfo string) []string {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if mp := fields[4]; strings.HasPrefix(mp, "/proc/") {
			if len(out) == 4 {
				out = append(out, "…")
				break
			}
			out = append(out, mp)
		}
	}
	return out
}

// bwrapUnavailable is New's error when bubblewrap does not work: it names
// what is missing when the checks above find it, else the usual fixes.
func bwrapUnavailable(err error, f hostFiles) error {
	fix := "either fix the host (install the bubblewrap package; in a container, allow user namespaces and a fresh /proc: docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined) or run unconfined with AGENTA_RUNNER_LOCAL_ISOLATION=none"
	if missing := missingForBwrap(f); len(missing) > 0 {
		fix = "missing: " + strings.Join(missing, "; ") + " (--privileged is not needed), or run unconfined with AGENTA_RUNNER_LOCAL_ISOLATION=none"
	}
	return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("local isolation bwrap does not work on this host: %w; %s", err, fix))
}
