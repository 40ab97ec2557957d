package daytona_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
)

func newSnapshots(t *testing.T, fake *daytonatest.Server) *daytona.Snapshots {
	t.Helper()
	s, err := daytona.NewSnapshots(daytona.Config{APIKey: fake.APIKey(), APIURL: fake.APIURL(), Clock: instantClock{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var piInstall = daytona.SnapshotInstall{
	Dir:      "pi",
	Packages: []string{"pi-acp@0.0.24", "@mariozechner/pi-coding-agent@0.73.1"},
	Bins:     []string{"pi-acp", "pi"},
}

func TestBuildSnapshot(t *testing.T) {
	t.Parallel()
	// Three polls per build: the snapshot is seen pending, then building.
	fake := daytonatest.New(t, daytonatest.Options{TransitionPolls: 3})
	spec := daytona.SnapshotSpec{
		Installs: []daytona.SnapshotInstall{
			{Dir: "claude", Packages: []string{"@agentclientprotocol/claude-agent-acp@0.101.0"}, Bins: []string{"claude-agent-acp"}},
			piInstall,
		},
		CPU: 2, MemoryGB: 4, DiskGB: 5, Wait: true,
	}
	got, err := newSnapshots(t, fake).Build(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != daytona.DefaultSnapshot || got.State != "active" || got.Existing {
		t.Fatalf("Build = %+v, want the default name, active, new", got)
	}
	if n := fake.Count("GET /api/snapshots/{id}"); n != 3 {
		t.Errorf("%d polls, want 3", n)
	}
	rec, ok := fake.Snapshot(daytona.DefaultSnapshot)
	if !ok {
		t.Fatal("the fake holds no snapshot")
	}
	if diff := cmp.Diff([]int{2, 4, 5}, []int{rec.CPU, rec.Memory, rec.Disk}); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	for _, want := range []string{
		"FROM " + daytona.DefaultBaseImage + "\n",
		"npm install --prefix /opt/runner/harnesses/claude --save-exact",
		"@agentclientprotocol/claude-agent-acp@0.101.0",
		"npm install --prefix /opt/runner/harnesses/pi --save-exact --no-audit --no-fund --no-update-notifier pi-acp@0.0.24 @mariozechner/pi-coding-agent@0.73.1",
		`require('/opt/runner/harnesses/pi/node_modules/@mariozechner/pi-coding-agent/package.json').version")" = 0.73.1`,
		"test -x /opt/runner/harnesses/claude/node_modules/.bin/claude-agent-acp",
		"test -x /opt/runner/harnesses/pi/node_modules/.bin/pi",
		`ENTRYPOINT ["sleep", "infinity"]`,
	} {
		if !strings.Contains(rec.Dockerfile, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, rec.Dockerfile)
		}
	}
	// The runner binary is uploaded per version by the provider, never baked in.
	if strings.Contains(rec.Dockerfile, "sandboxd") || strings.Contains(rec.Dockerfile, "COPY") {
		t.Errorf("Dockerfile bakes the runner in:\n%s", rec.Dockerfile)
	}
}

func TestBuildSnapshotFailed(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{TransitionPolls: 2})
	fake.FailSnapshot("broken-v1", "npm ERR! 404 Not Found - GET https://registry.npmjs.org/pi-acp")
	_, err := newSnapshots(t, fake).Build(t.Context(), daytona.SnapshotSpec{Name: "broken-v1", Installs: []daytona.SnapshotInstall{piInstall}, Wait: true})
	if err == nil || !strings.Contains(err.Error(), "build_failed") || !strings.Contains(err.Error(), "npm ERR! 404") || !strings.Contains(err.Error(), "broken-v1") {
		t.Fatalf("err = %v, want build_failed with Daytona's reason", err)
	}
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("err %v is not ErrConflict", err)
	}
}

func TestBuildSnapshotExisting(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	s := newSnapshots(t, fake)
	spec := daytona.SnapshotSpec{Name: "mine-v1", Installs: []daytona.SnapshotInstall{piInstall}, Wait: true}
	if _, err := s.Build(t.Context(), spec); err != nil {
		t.Fatal(err)
	}

	// Same name again: Daytona answers 409; the active snapshot is kept.
	fake.ResetCalls()
	again, err := s.Build(t.Context(), spec)
	if err != nil {
		t.Fatalf("second build of an existing active snapshot: %v", err)
	}
	if !again.Existing || again.Differs || again.State != "active" {
		t.Errorf("second build = %+v, want existing, same Dockerfile, active", again)
	}
	if n := fake.Count("POST /api/snapshots"); n != 1 {
		t.Errorf("%d creates, want 1 (no retry of a 409)", n)
	}

	// Other contents under that name: still kept, but flagged.
	spec.Base = "node:22-bookworm-slim"
	changed, err := s.Build(t.Context(), spec)
	if err != nil || !changed.Existing || !changed.Differs {
		t.Errorf("build with another base under an existing name = %+v, %v; want existing and differs", changed, err)
	}

	// An existing snapshot that failed is an error naming the way out.
	fake.FailSnapshot("failed-v1", "disk full")
	failed := daytona.SnapshotSpec{Name: "failed-v1", Installs: []daytona.SnapshotInstall{piInstall}, Wait: true}
	if _, err := s.Build(t.Context(), failed); err == nil {
		t.Fatal("the failing build succeeded")
	}
	_, err = s.Build(t.Context(), failed)
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "--name") {
		t.Errorf("rebuild over a failed snapshot: %v, want its reason and the way out", err)
	}
}

func TestBuildSnapshotNoWait(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{TransitionPolls: 5})
	got, err := newSnapshots(t, fake).Build(t.Context(), daytona.SnapshotSpec{Installs: []daytona.SnapshotInstall{piInstall}})
	if err != nil || got.State != "pending" || fake.Count("GET /api/snapshots/{id}") != 0 {
		t.Fatalf("Build without wait = %+v, %v, polls %d", got, err, fake.Count("GET /api/snapshots/{id}"))
	}
}

func TestSnapshotSpecValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		spec daytona.SnapshotSpec
		want string
	}{
		{"latest", daytona.SnapshotSpec{Base: "node:latest", Installs: []daytona.SnapshotInstall{piInstall}}, "tag other than latest"},
		{"untagged", daytona.SnapshotSpec{Base: "node", Installs: []daytona.SnapshotInstall{piInstall}}, "tag other than latest"},
		{"nothing", daytona.SnapshotSpec{}, "no harness"},
		{"unpinned", daytona.SnapshotSpec{Installs: []daytona.SnapshotInstall{{Dir: "x", Packages: []string{"pi-acp"}}}}, "exact version"},
		{"shell", daytona.SnapshotSpec{Installs: []daytona.SnapshotInstall{{Dir: "x", Packages: []string{"a@1; rm -rf /"}}}}, "exact version"},
		{"name", daytona.SnapshotSpec{Name: "bad name", Installs: []daytona.SnapshotInstall{piInstall}}, "snapshot name"},
	} {
		_, err := daytona.Dockerfile(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid mentioning %q", tc.name, err, tc.want)
		}
	}
}
