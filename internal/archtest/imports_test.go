package archtest

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite imports.txt and runner-deps.txt from the tree")

// layers places every package: an import goes to a lower layer, never
// across or up, except between test kits. The first entry that names a
// package, or a folder above it, decides; a package no entry names fails
// TestImportTable until it is placed here.
var layers = []struct {
	layer int
	pkgs  []string
}{
	// Leaves: libraries that import nothing of the module.
	{0, []string{"internal/errdefs", "internal/logkey", "internal/lograte", "internal/jsonrpc",
		"internal/metrics", "internal/config", "internal/filetree", "internal/tailbuf", "internal/testreport", "internal/archtest",
		"internal/client"}},
	// The vocabulary the families speak.
	{1, []string{"internal/wire", "internal/sandbox/egress", "internal/pool"}},
	// Families: an interface and its types (and the in-sandbox daemon,
	// which links no family).
	{2, []string{"internal/sandbox", "internal/store", "internal/workspace", "internal/platform", "internal/permission",
		"internal/render", "internal/gateway", "internal/tools", "internal/sandboxd"}},
	// Families built on others: an agent runs in a sandbox; a job's
	// request carries tools.
	{3, []string{"internal/agent", "internal/jobs"}},
	// Pieces implementations share, an implementation's own parts (the
	// local provider's seccomp filter, cgroups and network stack), the turn's event log, and the
	// harnesses' catalogue and configuration (their launch specs are
	// agent's, their checks run in a sandbox), and forwarding between
	// replicas (it reads the store's registry).
	{4, []string{"internal/sandboxd/client", "internal/store/sqlstore", "internal/store/pgcut", "internal/eventlog", "internal/sandbox/local/seccomp",
		"internal/sandbox/local/cgroup", "internal/sandbox/local/netstack", "internal/harness", "internal/peer"}},
	// Implementations (test kits among them are placed below first).
	{5, []string{"internal/sandbox/local", "internal/sandbox/daytona", "internal/sandbox/kubernetes", "internal/store/sqlite", "internal/store/postgres",
		"internal/agent/acp", "internal/workspace/fs", "internal/workspace/s3", "internal/workspace/resign",
		"internal/workspace/rclone", "internal/metrics/prom", "internal/platform/agenta", "internal/platform/traces",
		"internal/tools/relay"}},
	// The turn.
	{6, []string{"internal/runner"}},
	// Over the turn: the HTTP API, the job queue, the CLI's terminal.
	{7, []string{"internal/api", "internal/jobs/river", "internal/console"}},
	// The wiring.
	{8, []string{"cmd/runner"}},
}

// kitLayer holds the test kits (a package named …test, or below one):
// they may import anything, each other too.
const kitLayer = 9

func isKit(path string) bool {
	if path == "internal/archtest" || path == "internal/testreport" {
		return false // the architecture's tests and the test report's tool
	}
	for _, part := range strings.Split(path, "/") {
		if strings.HasSuffix(part, "test") {
			return true
		}
	}
	return false
}

func layerOf(path string) (int, bool) {
	if isKit(path) {
		return kitLayer, true
	}
	best, layer := "", 0
	for _, l := range layers {
		for _, p := range l.pkgs {
			if (path == p || strings.HasPrefix(path, p+"/")) && len(p) > len(best) {
				best, layer = p, l.layer
			}
		}
	}
	return layer, best != ""
}

// internalImports maps each package to what it imports of the module
// (tests aside).
func internalImports(t *testing.T) map[string][]string {
	out := map[string][]string{}
	for _, p := range list(t) {
		var imps []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				imps = append(imps, rel(imp))
			}
		}
		slices.Sort(imps)
		out[rel(p.ImportPath)] = imps
	}
	return out
}

// TestImportTable: every import arrow between the module's packages goes
// down the layers, and each is in imports.txt, so that a new one is a
// visible diff of that table (`go test ./internal/archtest -update`
// rewrites it).
func TestImportTable(t *testing.T) {
	graph := internalImports(t)
	var pkgs []string
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b string) int { // by layer, then name
		la, _ := layerOf(a)
		lb, _ := layerOf(b)
		if la != lb {
			return la - lb
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	b.WriteString("# The module's packages: layer, package, and what it imports of the module\n")
	b.WriteString("# (tests aside). An import goes to a lower layer (test kits, layer 9, aside).\n")
	b.WriteString("# Checked by TestImportTable; `go test ./internal/archtest -update` rewrites it.\n")
	for _, p := range pkgs {
		l, ok := layerOf(p)
		if !ok {
			t.Errorf("%s has no layer: place it in internal/archtest's layers", p)
			continue
		}
		for _, imp := range graph[p] {
			li, _ := layerOf(imp)
			if li >= l && l != kitLayer {
				t.Errorf("%s (layer %d) imports %s (layer %d): an import must go down the layers", p, l, imp, li)
			}
		}
		fmt.Fprintf(&b, "%d %s", l, p)
		if len(graph[p]) > 0 {
			fmt.Fprintf(&b, ": %s", strings.Join(graph[p], " "))
		}
		b.WriteString("\n")
	}
	compareFile(t, "imports.txt", b.String())
}

// compareFile fails when the checked-in file differs from want (-update
// writes it).
func compareFile(t *testing.T, name, want string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(name, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("%v (go test ./internal/archtest -update writes it)", err)
	}
	if diff := cmp.Diff(strings.Split(string(got), "\n"), strings.Split(want, "\n")); diff != "" {
		t.Errorf("internal/archtest/%s is not what the tree has (-file +tree); if the change is meant, go test ./internal/archtest -update:\n%s", name, diff)
	}
}

// TestRunnerDeps: runner-deps.txt lists the modules and packages from
// outside the module linked into the runner binary (as `make build`
// builds it for linux/amd64, standard library aside), so that a new
// dependency is a visible diff
// (`go test ./internal/archtest -update` rewrites it).
func TestRunnerDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}{{end}}", module+"/cmd/runner")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	mods, pkgs := map[string]bool{}, []string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		pkg, mod, _ := strings.Cut(line, " ")
		if pkg == "" {
			continue
		}
		if mod == module {
			continue // the module's own packages are imports.txt's
		}
		pkgs = append(pkgs, pkg)
		if mod != "" {
			mods[mod] = true
		}
	}
	slices.Sort(pkgs)
	var b strings.Builder
	b.WriteString("# What the runner binary links from outside the module (linux/amd64, CGO_ENABLED=0;\n")
	b.WriteString("# the standard library aside; the module's own packages are in imports.txt).\n")
	b.WriteString("# Checked by TestRunnerDeps; `go test ./internal/archtest -update` rewrites it.\n\n# modules\n")
	for _, m := range slices.Sorted(maps.Keys(mods)) {
		b.WriteString(m + "\n")
	}
	b.WriteString("\n# packages\n")
	for _, p := range pkgs {
		b.WriteString(p + "\n")
	}
	compareFile(t, "runner-deps.txt", b.String())
}
