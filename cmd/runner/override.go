package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/sandbox"
)

// overrideBinds are the host paths that AGENTA_RUNNER_HARNESS_<NAME>
// overrides name ("node /tmp/x/claude-agent-acp"), bound read-only into
// isolated local sandboxes, which otherwise see only the system
// directories and a private /tmp: for each absolute path, its package
// directory (the nearest with a package.json, so node_modules come along)
// or its own directory, and the same for a symlink's target. A path that
// does not exist, or whose bind would expose what sandboxes must not see
// (the host's whole /tmp, /root, /run, /etc, the runner's data dir), is
// refused at boot with the path and why.
func overrideBinds(cfg config.Config) ([]sandbox.Bind, error) {
	if cfg.Local.Isolation != "bwrap" || !slices.Contains(cfg.EnabledProviders, "local") {
		return nil, nil // no isolation: the harness sees the host as it is
	}
	var binds []sandbox.Bind
	var errs []string
	seen := map[string]bool{}
	harnessDir, _ := filepath.Abs(cfg.HarnessDir)
	add := func(env, named, dir string) {
		if dir == harnessDir || strings.HasPrefix(dir, harnessDir+"/") {
			return // bound already (harnessBinds)
		}
		if why := unsafeBind(cfg, dir); why != "" {
			errs = append(errs, fmt.Sprintf("%s names %s: binding %s into the sandbox would %s; install the harness in a directory of its own (e.g. under /opt)", env, named, dir, why))
			return
		}
		if !seen[dir] {
			seen[dir] = true
			binds = append(binds, sandbox.Bind{Path: dir})
		}
	}
	for _, name := range cfg.HarnessNames() {
		h := cfg.Harnesses[name]
		if !h.Custom {
			continue
		}
		env := "AGENTA_RUNNER_HARNESS_" + strings.ToUpper(name)
		for _, arg := range h.Command {
			if !filepath.IsAbs(arg) {
				continue
			}
			p := filepath.Clean(arg)
			fi, err := os.Stat(p)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s names %s, which the sandbox cannot run: %v", env, p, err))
				continue
			}
			dir := p
			if !fi.IsDir() {
				dir = packageDir(filepath.Dir(p))
			}
			add(env, p, dir)
			if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
				if fi.IsDir() {
					add(env, p, real)
				} else {
					add(env, p, packageDir(filepath.Dir(real)))
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("harness override cannot run in an isolated sandbox (AGENTA_RUNNER_LOCAL_ISOLATION=bwrap):\n%s", strings.Join(errs, "\n"))
	}
	return binds, nil
}

// unsafeBind says why binding dir read-only into every sandbox would leak
// what the sandbox hides, or "".
func unsafeBind(cfg config.Config, dir string) string {
	switch dir {
	case "/", "/tmp", "/var/tmp", "/dev/shm", "/home", "/usr", "/opt", "/var":
		return "expose all of the host's " + dir
	}
	for _, h := range []string{"/root", "/run", "/var/run", "/etc", "/proc", "/sys"} {
		if dir == h || strings.HasPrefix(dir, h+"/") {
			return "expose " + h + ", which sandboxes do not see"
		}
	}
	if data, err := filepath.Abs(cfg.DataDir); err == nil && (data == dir || strings.HasPrefix(data, dir+"/") || strings.HasPrefix(dir, data+"/")) {
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

// overrideBindsChecked is overrideBinds once boot has refused its errors.
func overrideBindsChecked(cfg config.Config) []sandbox.Bind {
	b, _ := overrideBinds(cfg)
	return b
}
