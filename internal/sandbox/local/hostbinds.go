package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentrunner/runner/internal/sandbox"
)

// Command is a command line the operator configured to run inside
// isolated sandboxes, and the setting that named it (for errors).
type Command struct {
	Setting string
	Argv    []string
}

// CommandBinds are the host paths that cmds name ("node
// /tmp/x/claude-agent-acp"), to bind read-only into isolated sandboxes,
// which otherwise see only the system directories and a private /tmp: for
// each absolute path, its package directory (the nearest with a
// package.json, so node_modules come along) or its own directory, and the
// same for a symlink's target. Paths under bound, already bound, are
// skipped. A path that does not exist, or whose bind would expose what
// sandboxes must not see (the host's whole /tmp, /root, /run, /etc, the
// runner's data dir dataDir), is refused with the setting, the path and
// why, one line each.
func CommandBinds(cmds []Command, bound, dataDir string) ([]sandbox.Bind, error) {
	var binds []sandbox.Bind
	var errs []string
	seen := map[string]bool{}
	bound, _ = filepath.Abs(bound)
	add := func(env, named, dir string) {
		if dir == bound || strings.HasPrefix(dir, bound+"/") {
			return
		}
		if why := unsafeBind(dataDir, dir); why != "" {
			errs = append(errs, fmt.Sprintf("%s names %s: binding %s into the sandbox would %s; install the harness in a directory of its own (e.g. under /opt)", env, named, dir, why))
			return
		}
		if !seen[dir] {
			seen[dir] = true
			binds = append(binds, sandbox.Bind{Path: dir})
		}
	}
	for _, c := range cmds {
		for _, arg := range c.Argv {
			if !filepath.IsAbs(arg) {
				continue
			}
			p := filepath.Clean(arg)
			fi, err := os.Stat(p)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s names %s, which the sandbox cannot run: %v", c.Setting, p, err))
				continue
			}
			dir := p
			if !fi.IsDir() {
				dir = packageDir(filepath.Dir(p))
			}
			add(c.Setting, p, dir)
			if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
				if fi.IsDir() {
					add(c.Setting, p, real)
				} else {
					add(c.Setting, p, packageDir(filepath.Dir(real)))
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	return binds, nil
}

// unsafeBind says why binding dir read-only into every sandbox would leak
// what the sandbox hides, or "".
func unsafeBind(dataDir, dir string) string {
	switch dir {
	case "/", "/tmp", "/var/tmp", "/dev/shm", "/home", "/usr", "/opt", "/var":
		return "expose all of the host's " + dir
	}
	for _, h := range []string{"/root", "/run", "/var/run", "/etc", "/proc", "/sys"} {
		if dir == h || strings.HasPrefix(dir, h+"/") {
			return "expose " + h + ", which sandboxes do not see"
		}
	}
	if data, err := filepath.Abs(dataDir); err == nil && (data == dir || strings.HasPrefix(data, dir+"/") || strings.HasPrefix(dir, data+"/")) {
		return "expose the runner's data dir " + data
	}
	return ""
}

// packageDir is the nearest directory at or above dir that holds a
// package.json (a Node package: its node_modules come with it), or dir.
func packageDir(dir string) string {
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "package.json")); err == nil {
			return d
		}
	}
	return dir
}
