package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/mattn/go-isatty"
)

// Installed is what List finds for one harness.
type Installed struct {
	Name string
	// Dir is the harness's npm prefix, <dir>/<Harness.Dir>.
	Dir string
	// Packages are the catalogue's packages with the version found under
	// node_modules ("" when missing).
	Packages []PackageState
	// Command is the resolved command line: the absolute path of the bin
	// script, then its arguments. Nil when the bin is missing.
	Command []string
	// Installed is true when every package is there at its pinned version
	// and the bin script exists.
	Installed bool
}

// PackageState is one package as found on disk.
type PackageState struct {
	Name    string
	Want    string // the pinned version
	Version string // the installed version, "" when missing
}

// List reports every catalogue harness as installed under dir, or not.
// It reads each package's package.json under node_modules; a missing or
// unreadable dir is "not installed", never an error.
func List(dir string) []Installed {
	var out []Installed
	for _, h := range Builtin() {
		out = append(out, inspect(dir, h))
	}
	return out
}

func inspect(dir string, h Harness) Installed {
	in := Installed{Name: h.Name, Dir: filepath.Join(dir, h.Dir), Installed: true}
	for _, p := range h.Packages {
		m, _ := readPackageJSON(in.Dir, p.Name)
		st := PackageState{Name: p.Name, Want: p.Version, Version: m.Version}
		in.Packages = append(in.Packages, st)
		if st.Version != st.Want {
			in.Installed = false
		}
	}
	if bin, err := binPath(in.Dir, h.Packages[0].Name, h.Bin); err == nil {
		in.Command = append([]string{bin}, h.Args...)
	} else {
		in.Installed = false
	}
	return in
}

// packageJSON is the part of a package.json List reads.
type packageJSON struct {
	Version string          `json:"version"`
	Bin     json.RawMessage `json:"bin"`
}

func readPackageJSON(prefix, pkg string) (packageJSON, error) {
	var m packageJSON
	b, err := os.ReadFile(filepath.Join(prefix, "node_modules", filepath.FromSlash(pkg), "package.json"))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// binPath returns the absolute path of pkg's bin script name, from the
// "bin" field of its package.json, and checks that it exists.
func binPath(prefix, pkg, name string) (string, error) {
	m, err := readPackageJSON(prefix, pkg)
	if err != nil {
		return "", err
	}
	var rel string
	if bytes.HasPrefix(m.Bin, []byte(`"`)) {
		// A string bin is named after the package, without its scope.
		if err := json.Unmarshal(m.Bin, &rel); err != nil || path.Base(pkg) != name {
			rel = ""
		}
	} else {
		var bins map[string]string
		_ = json.Unmarshal(m.Bin, &bins)
		rel = bins[name]
	}
	if rel == "" {
		return "", fmt.Errorf("package %s has no bin %q", pkg, name)
	}
	p, err := filepath.Abs(filepath.Join(prefix, "node_modules", filepath.FromSlash(pkg), filepath.FromSlash(rel)))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// Resolve returns the command line that starts name's ACP agent from its
// install under dir, and the environment the launch needs beyond the
// session's (Pi: PI_ACP_PI_COMMAND, the installed pi, which must stay off
// PATH). A harness that is missing or at the wrong version is an
// errdefs.ErrUnavailable error naming the `runner harness install`
// command to run.
func Resolve(dir, name string) (argv []string, env map[string]string, err error) {
	h, ok := Lookup(name)
	if !ok {
		return nil, nil, errdefs.With(errdefs.ErrUnprocessable, unknown(name))
	}
	in := inspect(dir, h)
	if !in.Installed {
		return nil, nil, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf(
			"harness %s is not installed in %s (%s): run `runner harness install %s`",
			name, dir, describe(in.Packages), name))
	}
	if h.Dir == "pi" {
		pi, err := binPath(in.Dir, "@mariozechner/pi-coding-agent", "pi")
		if err != nil {
			return nil, nil, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf(
				"harness %s: pi CLI: %w: run `runner harness install %s`", name, err, name))
		}
		env = map[string]string{"PI_ACP_PI_COMMAND": pi}
	}
	return in.Command, env, nil
}

// describe says what is wrong with an install, for an error.
func describe(ps []PackageState) string {
	var parts []string
	for _, p := range ps {
		switch p.Version {
		case p.Want:
		case "":
			parts = append(parts, p.Name+" missing")
		default:
			parts = append(parts, fmt.Sprintf("%s is %s, want %s", p.Name, p.Version, p.Want))
		}
	}
	if len(parts) == 0 {
		return "bin script missing"
	}
	return strings.Join(parts, "; ")
}

// Install installs the named harnesses under dir, one npm prefix each
// (pi_core and pi_agenta share one), skipping those already installed at
// their pinned versions. It runs `npm install --prefix <dir>/<Dir>
// <package@version>…` for each, one after the other. Progress, if not
// nil, gets a line per harness with its elapsed time; on a terminal the
// line ticks while npm runs. A failed install returns npm's output in the
// error. Cancelling ctx kills npm.
func Install(ctx context.Context, dir string, names []string, progress io.Writer) error {
	var todo []Harness
	seen := map[string]bool{}
	for _, name := range names {
		h, ok := Lookup(name)
		if !ok {
			return errdefs.With(errdefs.ErrInvalid, unknown(name))
		}
		if !seen[h.Dir] {
			seen[h.Dir] = true
			todo = append(todo, h)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("npm not found: install Node.js 20 or newer with npm: %w", err))
	}
	p := newProgress(progress)
	for _, h := range todo {
		label := h.Dir
		if in := inspect(dir, h); in.Installed {
			p.line(label, "already installed ("+pkgList(h.Packages)+")")
			continue
		}
		if err := npmInstall(ctx, npm, filepath.Join(dir, h.Dir), h.Packages, label, p); err != nil {
			return err
		}
		if in := inspect(dir, h); !in.Installed {
			return fmt.Errorf("install %s: npm finished but %s", label, describe(in.Packages))
		}
	}
	return nil
}

func pkgList(ps []Package) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, " ")
}

func npmInstall(ctx context.Context, npm, prefix string, pkgs []Package, label string, p *progress) error {
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", label, err)
	}
	args := []string{"install", "--prefix", prefix, "--save-exact", "--no-audit", "--no-fund", "--no-update-notifier"}
	for _, pkg := range pkgs {
		args = append(args, pkg.String())
	}
	cmd := exec.CommandContext(ctx, npm, args...)
	cmd.Dir = prefix
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	stop := p.start(label, pkgList(pkgs))
	err := cmd.Run()
	stop(err)
	if err != nil {
		return fmt.Errorf("install %s: npm %s: %w\n%s", label, strings.Join(args, " "), err, tail(out.String(), 4000))
	}
	return nil
}

// tail returns the last n bytes of s, marking a cut.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// progress writes install progress: plain lines, or on a terminal a
// line that ticks with the elapsed time until the step ends.
type progress struct {
	w    io.Writer
	tty  bool
	tick time.Duration
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, tick: 200 * time.Millisecond}
	if f, ok := w.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		p.tty = true
	}
	return p
}

func (p *progress) line(label, msg string) {
	if p.w != nil {
		fmt.Fprintf(p.w, "%-8s %s\n", label, msg)
	}
}

// start shows that a step began; the returned func ends it with its
// outcome and elapsed time.
func (p *progress) start(label, what string) func(error) {
	begin := time.Now()
	if p.w == nil {
		return func(error) {}
	}
	elapsed := func() string { return time.Since(begin).Round(100 * time.Millisecond).String() }
	if !p.tty {
		p.line(label, "installing "+what)
		return func(err error) {
			if err != nil {
				p.line(label, "failed after "+elapsed())
			} else {
				p.line(label, "installed in "+elapsed())
			}
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(p.tick)
		defer t.Stop()
		for {
			fmt.Fprintf(p.w, "\r\033[K%-8s installing %s … %s", label, what, elapsed())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func(err error) {
		close(done)
		wg.Wait()
		mark := "✓"
		if err != nil {
			mark = "✗"
		}
		fmt.Fprintf(p.w, "\r\033[K%-8s %s %s  %s\n", label, mark, what, elapsed())
	}
}
