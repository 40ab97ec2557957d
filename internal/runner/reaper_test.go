package runner_test

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/store"
)

// orphan creates a sandbox labelled with the runner's id that the store
// never heard of, as a runner that died between create and record leaves.
func orphan(t *testing.T, fake *daytonatest.Server) string {
	t.Helper()
	exe, _ := os.Executable()
	p, err := daytona.New(daytona.Config{APIKey: fake.APIKey(), APIURL: fake.APIURL(), DaemonBinary: exe, Version: "test-1", RunnerID: "replica-a", Clock: instant{}},
		slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	return sb.Info().ID
}

// parked runs a turn of session id and parks its sandbox (idle TTL).
func (e *remoteEnv) parked(t *testing.T, id string) string {
	t.Helper()
	stops := e.fake.Count(routeStop)
	e.turn(t, req{session: id, messages: []string{"say hi"}}.wire())
	e.clock.Advance(3 * time.Minute)
	waitFor(t, func() bool { return e.fake.Count(routeStop) == stops+1 })
	sess, err := e.st.GetSession(t.Context(), sk(id))
	if err != nil || sess.SandboxID == "" {
		t.Fatalf("session %s: %+v %v", id, sess, err)
	}
	return sess.SandboxID
}

func gone(fake *daytonatest.Server, id string) bool {
	st, ok := fake.Sandbox(id)
	return !ok || st.State == "destroying" || st.State == "destroyed"
}

func TestReaperDeletesOrphanOnSecondPass(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	id := orphan(t, fake)
	r := e.svc.Reaper(10 * time.Minute)

	// First pass: no record, perhaps a create still under way; kept.
	if n, err := r.ReapOnce(t.Context()); err != nil || n != 0 || gone(fake, id) {
		t.Fatalf("first pass: removed %d, %v; gone %v", n, err, gone(fake, id))
	}
	// Second pass, still unrecorded: deleted and recorded destroyed.
	if n, err := r.ReapOnce(t.Context()); err != nil || n != 1 || !gone(fake, id) {
		t.Fatalf("second pass: removed %d, %v; gone %v", n, err, gone(fake, id))
	}
	rec, err := e.st.GetSandbox(t.Context(), "daytona", id)
	if err != nil || rec.State != store.SandboxDestroyed {
		t.Errorf("record %+v, %v; want destroyed", rec, err)
	}
	// A third pass has nothing left to do.
	if n, err := r.ReapOnce(t.Context()); err != nil || n != 0 {
		t.Errorf("third pass: removed %d, %v", n, err)
	}
}

func TestReaperKeepsParkedSandboxOfActiveSession(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end reaper rounds: skipped under -short")
	}
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	id := e.parked(t, "s")
	warm := e.turn(t, req{session: "w", messages: []string{"say hi"}}.wire()) // a warm one too
	if !warm.res.OK {
		t.Fatalf("warm turn: %+v", warm.res)
	}
	r := e.svc.Reaper(10 * time.Minute)
	for pass := range 2 {
		if n, err := r.ReapOnce(t.Context()); err != nil || n != 0 {
			t.Fatalf("pass %d: removed %d, %v", pass, n, err)
		}
	}
	if fake.Count(routeDelete) != 0 || gone(fake, id) {
		t.Fatalf("the parked sandbox of an active session was deleted")
	}
	// The session resumes in its own sandbox.
	r2 := e.turn(t, req{session: "s", messages: []string{"say hi", "hi", "again"}}.wire())
	if fake.Count(routeCreate) != 2 || r2.mode != "load" {
		t.Errorf("resume after reaping: creates %d mode %q", fake.Count(routeCreate), r2.mode)
	}
}

func TestReaperRemovesDeletedSessionsSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end reaper rounds: skipped under -short")
	}
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	id := e.parked(t, "s")
	if err := e.svc.DeleteSession(t.Context(), sk("s")); err != nil {
		t.Fatal(err)
	}
	if gone(fake, id) {
		t.Skip("DeleteSession deleted the parked sandbox itself; nothing left to reap")
	}
	// The record names the deleted session: deleted on the first pass.
	if n, err := e.svc.Reaper(10 * time.Minute).ReapOnce(t.Context()); err != nil || n != 1 || !gone(fake, id) {
		t.Fatalf("removed %d, %v; gone %v", n, err, gone(fake, id))
	}
	rec, err := e.st.GetSandbox(t.Context(), "daytona", id)
	if err != nil || rec.State != store.SandboxDestroyed || rec.SessionID != "s" {
		t.Errorf("record %+v, %v; want destroyed, session kept", rec, err)
	}
}

// The loop runs a pass every interval on the service's clock, and Stop
// waits for it.
func TestReaperLoop(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	id := e.parked(t, "s")
	if err := e.svc.DeleteSession(t.Context(), sk("s")); err != nil {
		t.Fatal(err)
	}
	r := e.svc.Reaper(10 * time.Minute)
	r.Start()
	defer r.Stop()
	e.clock.Advance(9 * time.Minute)
	if fake.Count(routeDelete) != 0 {
		t.Fatalf("a pass ran before the interval")
	}
	e.clock.Advance(time.Minute)
	waitFor(t, func() bool { return gone(fake, id) })
	r.Stop()
	r.Stop() // idempotent
}

func TestReaperDisabled(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	e := newRemoteEnv(t, fake, nil)
	orphan(t, fake)
	r := e.svc.Reaper(0)
	r.Start() // starts nothing
	e.clock.Advance(24 * time.Hour)
	r.Stop()
	if n := fake.Count("GET /api/sandbox"); n != 0 {
		t.Fatalf("a disabled reaper listed sandboxes %d times", n)
	}
}
