package local

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/agentrunner/runner/internal/errdefs"
)

// runAs runs sandboxes as an unprivileged host user while the runner is
// root (Config.SandboxUID). Without it a root runner's sandboxes are root's
// uid in their own user namespace: without capabilities, but file
// permissions still let them read every root-owned file that is not hidden.
//
// bwrap cannot do this by itself (its --userns with --uid switches user
// before it sets up mounts, and then lacks the capabilities to). So the
// runner starts bwrap in a user namespace it makes itself, mapping root and
// the sandbox user to themselves; bwrap sets everything up as that
// namespace's root (which can traverse root-owned directories, so binds
// need no permission changes), and setpriv switches to the sandbox user as
// the last step before the command, dropping every capability.
type runAs struct {
	uid, gid int
	setpriv  []string // the argv prefix that switches user
}

func newRunAs(cfg Config) (*runAs, error) {
	if cfg.SandboxUID <= 0 {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, errdefs.Invalidf("a sandbox uid (AGENTA_RUNNER_LOCAL_SANDBOX_UID) needs the runner to run as root")
	}
	gid := cfg.SandboxGID
	if gid <= 0 {
		gid = cfg.SandboxUID
	}
	path, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("a sandbox uid needs setpriv (util-linux): %w", err)
	}
	return &runAs{
		uid: cfg.SandboxUID,
		gid: gid,
		setpriv: []string{path, "--reuid=" + strconv.Itoa(cfg.SandboxUID), "--regid=" + strconv.Itoa(gid),
			"--clear-groups", "--inh-caps=-all", "--"},
	}, nil
}

// userns makes the process start in a new user namespace where root and the
// sandbox user map to themselves.
func (u *runAs) userns(attr *syscall.SysProcAttr) {
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: u.uid, HostID: u.uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: u.gid, HostID: u.gid, Size: 1}}
	// setpriv --clear-groups calls setgroups.
	attr.GidMappingsEnableSetgroups = true
}

// ownDir gives a sandbox directory to the sandbox user. bwrap's last steps
// (chdir) run as the namespace's root without capabilities, before setpriv
// switches user, so the directories must be searchable by others: the
// sandbox's own directory above them (0700, root) keeps other host users
// out. tmp is shared like /tmp.
func (u *runAs) ownDir(dir string, tmp bool) error {
	if u == nil {
		return nil
	}
	mode := os.FileMode(0o755)
	if tmp {
		mode = 0o1777
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	return u.own(dir)
}

// own gives path to the sandbox user; nil-safe.
func (u *runAs) own(path string) error {
	if u == nil {
		return nil
	}
	if err := os.Lchown(path, u.uid, u.gid); err != nil {
		return fmt.Errorf("give %s to the sandbox user: %w", path, err)
	}
	return nil
}
