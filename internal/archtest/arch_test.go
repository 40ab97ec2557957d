package archtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/agentrunner/runner"

type pkg struct {
	ImportPath string
	Doc        string
	Imports    []string
	Name       string
	Dir        string
	GoFiles    []string
}

// list is the module's packages, listed once for every test that asks
// (each go list of the module takes a second or two on a loaded machine).
func list(t *testing.T) []pkg {
	t.Helper()
	listed.once.Do(func() { listed.pkgs, listed.err = goList("") })
	if listed.err != nil {
		t.Fatal(listed.err)
	}
	return listed.pkgs
}

var listed struct {
	once sync.Once
	pkgs []pkg
	err  error
}

// listIn is list for the module checked out in dir, not kept.
func listIn(t *testing.T, dir string) []pkg {
	t.Helper()
	pkgs, err := goList(dir)
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// goList runs go list over the module checked out in dir ("": this one).
func goList(dir string) ([]pkg, error) {
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, errb.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// implementations are packages that implement a family interface; only
// cmd/runner (and tests) may import them.
var implementations = []string{
	"internal/sandbox/local", "internal/sandbox/daytona", "internal/sandbox/kubernetes",
	"internal/store/sqlite", "internal/store/postgres",
	"internal/agent/acp",
	"internal/workspace/fs", "internal/workspace/s3", "internal/workspace/resign", "internal/workspace/rclone",
	"internal/metrics/prom", "internal/jobs/river",
}

func rel(path string) string { return strings.TrimPrefix(path, module+"/") }

func TestImportArrows(t *testing.T) {
	for _, p := range list(t) {
		from := rel(p.ImportPath)
		for _, imp := range p.Imports {
			to := rel(imp)
			if !strings.HasPrefix(imp, module) {
				continue
			}
			// Implementations never import a sibling of their family (an
			// implementation's own packages, local/seccomp, are its own).
			if fam, ok := family(from); ok {
				if fam2, ok2 := family(to); ok2 && fam == fam2 && isImpl(to) && isImpl(from) && implOf(from) != implOf(to) {
					t.Errorf("%s imports its sibling %s", from, to)
				}
			}
			// Only the wiring imports implementations.
			if isImpl(to) && !strings.HasPrefix(from, "cmd/") && !strings.HasSuffix(from, "test") && implOf(from) != implOf(to) {
				t.Errorf("%s imports the implementation %s; depend on its family interface and let cmd/runner wire it", from, to)
			}
		}
	}
}

func TestEveryPackageHasADoc(t *testing.T) {
	for _, p := range list(t) {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package doc comment", p.ImportPath)
		}
	}
}

// implOf is the implementation path is, or is a package of.
func implOf(path string) string {
	for _, i := range implementations {
		if path == i || strings.HasPrefix(path, i+"/") {
			return i
		}
	}
	return ""
}

func isImpl(path string) bool {
	for _, i := range implementations {
		if path == i || strings.HasPrefix(path, i+"/") {
			return true
		}
	}
	return false
}

func family(path string) (string, bool) {
	parts := strings.Split(path, "/")
	if len(parts) >= 3 && parts[0] == "internal" {
		return parts[1], true
	}
	return "", false
}
