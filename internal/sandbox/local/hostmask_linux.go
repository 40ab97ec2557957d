package local

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/sandbox/local/cgroup"
)

// Host unix sockets. A read-only mount does not stop connect(2), so every
// listening socket the sandbox could reach through the host's read-only
// root is masked. Seccomp cannot see connect's path, and Landlock cannot
// refuse connecting to a pathname socket on the kernels this runs on, so
// the sockets are found instead: /proc/net/unix lists every bound socket of
// the runner's network namespace by path, and it is read anew for each
// sandbox process, so a service started after the runner is masked too. A socket's
// directory is masked with an empty tmpfs, which also covers the socket its
// service re-creates there; one directly under a top-level directory
// (/home/u.sock, /var/x.sock) gets /dev/null bound over it instead, so the
// directory's other files stay. Not found this way: sockets bound with a
// relative path or in another network namespace (a socket bind-mounted into
// the runner's container); the usual places for those (/run, /var/run) are
// hidden as a whole (alwaysHidden).

// procNetUnix is where the bound unix sockets are listed; a variable for
// tests.
var procNetUnix = "/proc/net/unix"

// socketPaths parses /proc/net/unix: the paths of pathname sockets (not
// abstract or unnamed ones). The path is everything after the seventh
// field; names with a newline split a line, so callers check each path is
// a socket before acting on it.
func socketPaths(table string) []string {
	var out []string
	lines := strings.Split(table, "\n")
	for _, line := range lines[min(1, len(lines)):] {
		rest := line
		for range 7 {
			rest = strings.TrimLeft(rest, " ")
			i := strings.IndexByte(rest, ' ')
			if i < 0 {
				rest = ""
				break
			}
			rest = rest[i:]
		}
		if p := strings.TrimLeft(rest, " "); strings.HasPrefix(p, "/") {
			out = append(out, p)
		}
	}
	return out
}

// socketMasks are the bwrap arguments masking the host sockets s would
// see; they come after s's own binds, so a directory holding one of those
// is never covered. Sockets in s's own directories and binds are left alone
// (the tool relay's socket is one), as are those under paths already
// hidden.
func (b *bwrap) socketMasks(s *Sandbox) []string {
	table, err := os.ReadFile(procNetUnix)
	if err != nil {
		return nil
	}
	var args []string
	seen := map[string]bool{}
	for _, p := range socketPaths(string(table)) {
		real := p
		if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			real = filepath.Join(dir, filepath.Base(p))
		}
		if seen[real] || seen[filepath.Dir(real)] {
			continue
		}
		st, err := os.Lstat(real)
		if err != nil || st.Mode()&fs.ModeSocket == 0 || b.owned(s, real) || !b.visible(s, real) {
			continue
		}
		dir := filepath.Dir(real)
		if depth(dir) >= 3 && !b.holdsOwn(s, dir) {
			seen[dir] = true
			args = append(args, "--tmpfs", dir)
			continue
		}
		seen[real] = true
		args = append(args, "--ro-bind", "/dev/null", real)
	}
	return args
}

func depth(dir string) int {
	return len(strings.Split(strings.Trim(dir, "/"), "/"))
}

// ownPaths are the host paths bound into s as its own.
func (b *bwrap) ownPaths(s *Sandbox) []string {
	own := []string{s.info.Workdir, s.info.Home}
	if d := s.info.AgentDir; d != "" {
		own = append(own, d)
	}
	for _, bd := range s.spec.Binds {
		own = append(own, bd.Path)
	}
	return append(own, b.bridge...)
}

// owned reports whether path lies in one of s's own paths.
func (b *bwrap) owned(s *Sandbox, path string) bool {
	for _, o := range b.ownPaths(s) {
		if o != "" && within(path, o) {
			return true
		}
	}
	return false
}

// holdsOwn reports whether one of s's own paths lies in dir, which a tmpfs
// over dir would then cover.
func (b *bwrap) holdsOwn(s *Sandbox, dir string) bool {
	for _, o := range b.ownPaths(s) {
		if o != "" && within(o, dir) {
			return true
		}
	}
	return false
}

// sysMasks hide what /sys tells about the host: its cgroup tree (every
// sandbox's usage, the runner's own group) and its network interfaces
// (names, MAC addresses) under /sys/class/net and each device's net
// directory. Each sandbox gets its own cgroup back read-only
// (cgroupBinds), so a runtime that sizes itself from its limits (Go, Node)
// still can. The rest of /sys stays: CPU topology and the like, which
// runtimes read.
func sysMasks() []string {
	dirs := []string{"/sys/fs/cgroup", "/sys/class/net", "/sys/devices/virtual/net"}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			if target, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", e.Name())); err == nil {
				dirs = append(dirs, filepath.Dir(target))
			}
		}
	}
	var args []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] || coveredByOther(d, dirs) {
			continue
		}
		seen[d] = true
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			args = append(args, "--tmpfs", d)
		}
	}
	return args
}

// cgroupBinds put the sandbox's own cgroup where /sys/fs/cgroup was,
// read-only: the v2 group itself, or each v1 controller's group under its
// controller's name.
func cgroupBinds(cg *cgroup.Group) []string {
	if cg == nil {
		return nil
	}
	dirs := cg.Dirs()
	if dir, v2 := dirs[""]; v2 {
		return []string{"--ro-bind", dir, "/sys/fs/cgroup"}
	}
	var args []string
	for _, c := range slices.Sorted(maps.Keys(dirs)) {
		args = append(args, "--ro-bind", dirs[c], filepath.Join("/sys/fs/cgroup", c))
	}
	return args
}
