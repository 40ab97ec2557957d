package daytona_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
)

// TestRealDaytona runs the provider against Daytona itself when
// DAYTONA_API_KEY is set (DAYTONA_API_URL, DAYTONA_TARGET and
// DAYTONA_SNAPSHOT are honoured). The daemon is testdata/sandboxd built
// static for linux/amd64.
func TestRealDaytona(t *testing.T) {
	key := os.Getenv("DAYTONA_API_KEY")
	if key == "" {
		t.Skip("DAYTONA_API_KEY is not set: skipping the test against real Daytona")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the daemon binary: ", err)
	}
	bin := filepath.Join(t.TempDir(), "sandboxd")
	build := exec.Command(goTool, "build", "-o", bin, "./testdata/sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build daemon: %v\n%s", err, out)
	}
	p, err := daytona.New(daytona.Config{
		APIKey: key, APIURL: os.Getenv("DAYTONA_API_URL"), Target: os.Getenv("DAYTONA_TARGET"),
		Snapshot: os.Getenv("DAYTONA_SNAPSHOT"), DaemonBinary: bin, Version: "test-" + time.Now().Format("20060102150405"),
		RunnerID: "runner-test", AutoDeleteMinutes: 10,
	}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, sandbox.Spec{SessionID: "real-daytona-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	}()
	echo(t, sb, "hello daytona")
	if err := sb.(sandbox.Pauser).Pause(ctx); err != nil {
		t.Fatal(err)
	}
	sb2, err := p.Open(ctx, sb.Info().ID, sandbox.Spec{SessionID: "real-daytona-test", Network: sandbox.Network{Mode: "off"}})
	if err != nil {
		t.Fatal(err)
	}
	echo(t, sb2, "hello again")
}
