package harness_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/harness"
	"github.com/google/go-cmp/cmp"
)

func TestCatalogue(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for _, h := range harness.Builtin() {
		var pkgs []string
		for _, p := range h.Packages {
			pkgs = append(pkgs, p.String())
		}
		got[h.Name] = h.Dir + ": " + strings.Join(pkgs, " ") + " → " + strings.Join(append([]string{h.Bin}, h.Args...), " ")
	}
	want := map[string]string{
		"claude":    "claude: @agentclientprotocol/claude-agent-acp@0.101.0 → claude-agent-acp",
		"codex":     "codex: @agentclientprotocol/codex-acp@2.6.0 → codex-acp",
		"pi_core":   "pi: pi-acp@0.0.24 @mariozechner/pi-coding-agent@0.73.1 → pi-acp",
		"pi_agenta": "pi: pi-acp@0.0.24 @mariozechner/pi-coding-agent@0.73.1 → pi-acp",
		"gemini":    "gemini: @google/gemini-cli@0.61.0 → gemini --acp",
		"opencode":  "opencode: opencode-ai@1.18.33 → opencode acp",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("catalogue (-want +got):\n%s", diff)
	}
}

// fakeNPM puts an npm on PATH that writes each package's package.json
// (bins for every catalogue bin name, all pointing at bin.js) under
// --prefix, logs its arguments to the returned file, and fails with npm's
// 404 text when FAKE_NPM_FAIL is set. Tests using it cannot run in
// parallel: PATH is process-wide.
func fakeNPM(t *testing.T) (log string) {
	t.Helper()
	bin := t.TempDir()
	log = filepath.Join(bin, "npm.log")
	script := `#!/bin/sh
echo "$@" >> ` + log + `
if [ -n "$FAKE_NPM_FAIL" ]; then
  echo "npm error code E404" >&2
  echo "npm error 404 Not Found - GET https://registry.npmjs.org/nope" >&2
  exit 1
fi
prefix=""; pkgs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2;;
    -*|install) shift;;
    *) pkgs="$pkgs $1"; shift;;
  esac
done
for p in $pkgs; do
  name=${p%@*}; ver=${p##*@}
  d="$prefix/node_modules/$name"; mkdir -p "$d"
  printf '{"name":"%s","version":"%s","bin":{"claude-agent-acp":"bin.js","codex-acp":"bin.js","pi-acp":"bin.js","pi":"bin.js","gemini":"bin.js","opencode":"bin.js"}}' "$name" "$ver" > "$d/package.json"
  printf '#!/bin/sh\n' > "$d/bin.js"; chmod +x "$d/bin.js"
done
echo "added $(echo $pkgs | wc -w) packages"
`
	if err := os.WriteFile(filepath.Join(bin, "npm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

func TestInstallListResolve(t *testing.T) {
	log := fakeNPM(t)
	dir := t.TempDir()
	var progress bytes.Buffer
	if err := harness.Install(t.Context(), dir, []string{"pi_core", "gemini", "pi_agenta"}, &progress); err != nil {
		t.Fatal(err)
	}
	calls, _ := os.ReadFile(log)
	wantCalls := "install --prefix " + dir + "/pi --save-exact --no-audit --no-fund --no-update-notifier pi-acp@0.0.24 @mariozechner/pi-coding-agent@0.73.1\n" +
		"install --prefix " + dir + "/gemini --save-exact --no-audit --no-fund --no-update-notifier @google/gemini-cli@0.61.0\n"
	if diff := cmp.Diff(wantCalls, string(calls)); diff != "" {
		t.Errorf("npm calls (-want +got):\n%s", diff)
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "installing pi-acp@0.0.24") || !strings.Contains(lines[1], "installed in ") {
		t.Errorf("progress:\n%s", progress.String())
	}

	installed := map[string]bool{}
	for _, in := range harness.List(dir) {
		installed[in.Name] = in.Installed
		if in.Name == "pi_core" {
			want := harness.Installed{
				Name: "pi_core", Dir: dir + "/pi", Installed: true,
				Packages: []harness.PackageState{
					{Name: "pi-acp", Want: "0.0.24", Version: "0.0.24"},
					{Name: "@mariozechner/pi-coding-agent", Want: "0.73.1", Version: "0.73.1"},
				},
				Command: []string{dir + "/pi/node_modules/pi-acp/bin.js"},
			}
			if diff := cmp.Diff(want, in); diff != "" {
				t.Errorf("List pi_core (-want +got):\n%s", diff)
			}
		}
	}
	wantInstalled := map[string]bool{"claude": false, "codex": false, "pi_core": true, "pi_agenta": true, "gemini": true, "opencode": false}
	if diff := cmp.Diff(wantInstalled, installed); diff != "" {
		t.Errorf("installed (-want +got):\n%s", diff)
	}

	argv, env, err := harness.Resolve(dir, "pi_agenta")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{dir + "/pi/node_modules/pi-acp/bin.js"}, argv); diff != "" {
		t.Errorf("pi argv (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"PI_ACP_PI_COMMAND": dir + "/pi/node_modules/@mariozechner/pi-coding-agent/bin.js"}, env); diff != "" {
		t.Errorf("pi env (-want +got):\n%s", diff)
	}
	argv, env, err = harness.Resolve(dir, "gemini")
	if err != nil || env != nil {
		t.Fatal(err, env)
	}
	if diff := cmp.Diff([]string{dir + "/gemini/node_modules/@google/gemini-cli/bin.js", "--acp"}, argv); diff != "" {
		t.Errorf("gemini argv (-want +got):\n%s", diff)
	}

	// Installed harnesses are skipped.
	progress.Reset()
	if err := harness.Install(t.Context(), dir, []string{"gemini"}, &progress); err != nil {
		t.Fatal(err)
	}
	if calls2, _ := os.ReadFile(log); len(calls2) != len(calls) || !strings.Contains(progress.String(), "already installed") {
		t.Errorf("second install ran npm again or said %q", progress.String())
	}
}

func TestResolveNotInstalled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, _, err := harness.Resolve(dir, "claude")
	want := "harness claude is not installed in " + dir + " (@agentclientprotocol/claude-agent-acp missing): run `runner harness install claude`"
	if !errors.Is(err, errdefs.ErrUnavailable) || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}

	// A stale version is not installed either, and the error says so.
	pkg := filepath.Join(dir, "pi", "node_modules", "pi-acp")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"version":"0.0.34","bin":{"pi-acp":"dist/index.js"}}`), 0o644)
	_, _, err = harness.Resolve(dir, "pi_core")
	if err == nil || !strings.Contains(err.Error(), "pi-acp is 0.0.34, want 0.0.24; @mariozechner/pi-coding-agent missing") ||
		!strings.HasSuffix(err.Error(), "run `runner harness install pi_core`") {
		t.Errorf("err = %v", err)
	}

	if _, _, err := harness.Resolve(dir, "aider"); !errors.Is(err, errdefs.ErrUnprocessable) {
		t.Errorf("unknown harness: %v", err)
	}
}

func TestInstallFailure(t *testing.T) {
	fakeNPM(t)
	t.Setenv("FAKE_NPM_FAIL", "1")
	err := harness.Install(t.Context(), t.TempDir(), []string{"codex"}, nil)
	if err == nil || !strings.Contains(err.Error(), "install codex: npm install --prefix") ||
		!strings.Contains(err.Error(), "npm error 404 Not Found") {
		t.Errorf("err = %v", err)
	}
}

func TestInstallRejects(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if err := harness.Install(t.Context(), t.TempDir(), []string{"claude", "aider"}, nil); !errors.Is(err, errdefs.ErrInvalid) ||
		!strings.Contains(err.Error(), `unknown harness "aider"`) {
		t.Errorf("unknown name: %v", err)
	}
	if err := harness.Install(t.Context(), t.TempDir(), []string{"claude"}, nil); !errors.Is(err, errdefs.ErrUnavailable) ||
		!strings.Contains(err.Error(), "npm not found") {
		t.Errorf("no npm: %v", err)
	}
}
