package archtest

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// linuxOnly are the only packages that need not build elsewhere: the
// local sandbox provider isolates with Linux's bubblewrap, namespaces,
// cgroups, seccomp and nftables. Its other parts keep their Linux code in
// _linux.go files, so they build (and are vetted) for macOS too.
var linuxOnly = []string{"internal/sandbox/local", "internal/sandbox/local/seccomp"}

// linuxOnlyTests are the packages whose tests start local sandboxes:
// elsewhere their code builds and their tests do not.
var linuxOnlyTests = []string{"internal/agent/acp", "internal/api", "internal/jobs/river", "internal/runner"}

func darwinEnv() []string {
	return append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
}

// TestVetsOnDarwin: every package but linuxOnly builds for macOS, and
// passes go vet there with its tests (but linuxOnlyTests', which only
// build), so a contributor on a Mac can build, vet and run what does not
// need Linux. The lists are checked always (go list); the vet and build,
// which cross-compile the module and the standard library, with
// RUNNER_TEST_DARWIN=1 (.ci/run sets it).
func TestVetsOnDarwin(t *testing.T) {
	isLinuxOnly := func(p string) bool { return slices.Contains(linuxOnly, p) }
	// Each test binary's dependencies: "P [P.test]", "P_test [P.test]".
	cmd := exec.Command("go", "list", "-test", "-deps=false", "-f", "{{.ImportPath}}|{{join .Deps \" \"}}", module+"/...")
	cmd.Env = darwinEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	var all []string
	testsNeedLinux := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		name, deps, _ := strings.Cut(line, "|")
		pkg, variant, _ := strings.Cut(name, " ")
		pkg = rel(strings.TrimSuffix(strings.TrimSuffix(pkg, ".test"), "_test"))
		if variant == "" && !strings.HasSuffix(name, ".test") {
			all = append(all, pkg)
		}
		if isLinuxOnly(pkg) {
			continue
		}
		for _, d := range strings.Fields(deps) {
			if strings.HasPrefix(d, module+"/") && isLinuxOnly(rel(d)) {
				testsNeedLinux[pkg] = true
			}
		}
	}
	var vet, build []string
	for _, p := range all {
		switch {
		case isLinuxOnly(p):
		case testsNeedLinux[p]:
			build = append(build, module+"/"+p)
		default:
			vet = append(vet, module+"/"+p)
		}
	}
	got := slices.Sorted(maps.Keys(testsNeedLinux))
	if diff := cmp.Diff(linuxOnlyTests, got); diff != "" {
		t.Errorf("packages whose tests need the Linux-only ones (-linuxOnlyTests +tree): update linuxOnlyTests if that is meant:\n%s", diff)
	}
	if os.Getenv("RUNNER_TEST_DARWIN") != "1" {
		t.Skip("set RUNNER_TEST_DARWIN=1 to vet and build the module for darwin (the lists are checked)")
	}
	for _, c := range [][]string{append([]string{"vet"}, vet...), append([]string{"build"}, build...)} {
		cmd := exec.Command("go", c...)
		cmd.Env = darwinEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=darwin go %s: %v\n%s", c[0], err, out)
		}
	}
}
