package config_test

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/config"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the generated tables in docs/configuration.md and README.md")

const (
	beginMark = "<!-- generated from internal/config/settings.go by `go generate ./internal/config`; do not edit -->\n"
	endMark   = "<!-- end of generated table -->\n"
)

// TestGeneratedDocs: the settings tables of docs/configuration.md and the
// README are the settings table's, byte for byte; -update (or go generate)
// rewrites them.
func TestGeneratedDocs(t *testing.T) {
	for file, want := range map[string]string{
		"../../docs/configuration.md": config.Reference(),
		"../../README.md":             config.MainTable(),
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		i, j := strings.Index(text, beginMark), strings.Index(text, endMark)
		if i < 0 || j < i {
			t.Fatalf("%s has no generated table between %q and %q", file, beginMark, endMark)
		}
		got := text[i+len(beginMark) : j]
		if got == want {
			continue
		}
		if *update {
			if err := os.WriteFile(file, []byte(text[:i+len(beginMark)]+want+text[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s differs from the settings table; run `go generate ./internal/config` (-file +table):\n%s", file, cmp.Diff(got, want))
	}
}

// TestSettingsTable: every setting is documented once, and every literal
// default parses: Load with nothing set reports no problem at all.
func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range config.Settings() {
		for _, n := range append([]string{s.Name}, s.Aliases...) {
			if seen[n] {
				t.Errorf("%s is in the table twice", n)
			}
			seen[n] = true
		}
		if s.Doc == "" || s.Component == "" || s.Type == "" {
			t.Errorf("%s lacks its doc, component or type", s.Name)
		}
		if !slices.Contains(config.Components, s.Component) {
			t.Errorf("%s: component %q is not in Components", s.Name, s.Component)
		}
	}
	if _, warnings, err := config.Load(nil); err != nil || len(warnings) > 0 {
		t.Errorf("defaults: err %v warnings %v", err, warnings)
	}
}

// TestHelpNamesEverySetting: `runner serve --help` is the table too.
func TestHelpNamesEverySetting(t *testing.T) {
	var b strings.Builder
	config.WriteHelp(&b)
	for _, s := range config.Settings() {
		if !strings.Contains(b.String(), "  "+s.Name) {
			t.Errorf("help lacks %s", s.Name)
		}
	}
}

// TestEveryVariableIsInTheTable: a variable the code names is a setting
// in the table (so it is loaded and documented in one place), unless it is
// a test suite's gate, a benchmark's knob or a harness name.
func TestEveryVariableIsInTheTable(t *testing.T) {
	have := map[string]bool{}
	for _, s := range config.Settings() {
		have[s.Name] = true
		for _, a := range s.Aliases {
			have[a] = true
		}
	}
	literal := regexp.MustCompile(`"((?:AGENTA_RUNNER|AGENTA_AGENT|AGENTA_API|DAYTONA|RUNNER|SANDBOX_AGENT)_[A-Z0-9_]+)`)
	for _, dir := range []string{"../../cmd", "../../internal"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range literal.FindAllStringSubmatch(string(data), -1) {
				name := m[1]
				switch {
				case have[name], strings.HasPrefix(name, "RUNNER_TEST_"), strings.HasPrefix(name, "RUNNER_BENCH_"), strings.HasPrefix(name, "AGENTA_RUNNER_HARNESS_"):
				default:
					t.Errorf("%s names %s, which is not in the settings table (internal/config/settings.go)", path, name)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
