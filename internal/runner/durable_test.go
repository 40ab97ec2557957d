package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/agent/agenttest"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/runnertest"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/agentrunner/runner/internal/workspace"
	"github.com/agentrunner/runner/internal/workspace/fs"
)

// durableEnv is a runner on its own data dir (sandboxes), sharing the
// session store st and the object store in storeDir with other runners.
func durableEnv(t *testing.T, st store.Store, storeDir string, opts ...option) *env {
	t.Helper()
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	base, err := fs.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]option{func(c *runner.Config) {
		c.KeepAlive = false
		c.Workspaces = workspace.Configured{Base: base}
		c.Harnesses["fake"] = agent.Spec{Command: agenttest.Command(), StateDirs: []string{agenttest.StateDir}, KeyedDirs: agenttest.KeyedDirs()}
	}}, opts...)
	return newEnvWithStore(t, []sandbox.Provider{p}, st, all...)
}

func sharedStore(t *testing.T) store.Store { return runnertest.SQLite(t) }

// TestWorkspaceFollowsTheSessionToANewRunner: a second runner with its
// own data dir (the first runner's sandboxes are gone) continues the
// session with every file back, and the harness reloads its own
// transcript natively.
func TestWorkspaceFollowsTheSessionToANewRunner(t *testing.T) {
	st := sharedStore(t)
	storeDir := t.TempDir()
	first := durableEnv(t, st, storeDir)
	one := first.turn(t, req{session: "s", messages: []string{"exec echo kept > notes.txt && mkdir -p src/empty && printf '#!/bin/sh\\n' > run.sh && chmod 750 run.sh && ln -s notes.txt link && echo pwd=$(pwd)\nsay remember heron"}})
	if !strings.Contains(one.res.Output, "exec exit 0") {
		t.Fatalf("first turn: %q", one.res.Output)
	}
	_ = first.svc.Shutdown(context.Background())

	second := durableEnv(t, st, storeDir)
	two := second.turn(t, req{session: "s", messages: []string{"exec echo kept > notes.txt", one.res.Output, "read notes.txt\nexec ls -l --time-style=+ run.sh link; test -d src/empty && echo empty-dir-kept\nhistory"}})
	if two.mode != "load" {
		t.Fatalf("second runner: mode %q, want load (the transcript was not restored)", two.mode)
	}
	out := two.res.Output
	for _, want := range []string{"read ok: kept", "-rwxr-x---", "link -> notes.txt", "empty-dir-kept", "history 1: exec echo kept"} {
		if !strings.Contains(out, want) {
			t.Errorf("second runner's turn lacks %q:\n%s", want, out)
		}
	}
	_ = second.svc.Shutdown(context.Background())

	// The fake agent keys its transcript by the working directory, as
	// Claude does, and every runner's differs: the store keeps it under
	// the second's key alone, and a third runner moves it again.
	keyed := filepath.Join(storeDir, "sessions/p/s", workspace.MetaDir, "home", agenttest.StateDir)
	if dirs, err := os.ReadDir(keyed); err != nil || len(dirs) != 1 {
		t.Errorf("keyed transcript dirs in the store: %v %v, want one", dirs, err)
	}
	third := durableEnv(t, st, storeDir)
	three := third.turn(t, req{session: "s", messages: []string{"exec echo kept > notes.txt", one.res.Output, "read notes.txt", two.res.Output, "history"}})
	if three.mode != "load" || !strings.Contains(three.res.Output, "history 2:") || !strings.Contains(three.res.Output, "remember heron | read notes.txt") {
		t.Fatalf("third runner: mode %q, output:\n%s", three.mode, three.res.Output)
	}
}

// TestTranscriptMoveSurvivesAnInterruptedCheckpoint: the record names
// the new working directory but the checkpoint that would have moved the
// transcript never landed (the record is written first): the next
// sandbox still finds it under the previous one.
func TestTranscriptMoveSurvivesAnInterruptedCheckpoint(t *testing.T) {
	st := sharedStore(t)
	storeDir := t.TempDir()
	first := durableEnv(t, st, storeDir)
	one := first.turn(t, req{session: "s", messages: []string{"exec pwd\nsay remember heron"}})
	_ = first.svc.Shutdown(context.Background())
	pwd := strings.Split(strings.TrimPrefix(one.res.Output, "exec exit 0\n"), "\n")[0]
	if !filepath.IsAbs(pwd) {
		t.Fatalf("first turn's pwd: %q in %q", pwd, one.res.Output)
	}
	rec, _ := json.Marshal(map[string]string{"workdir": "/a/sandbox/that/died", "previous": pwd})
	if err := os.WriteFile(filepath.Join(storeDir, "sessions/p/s", workspace.MetaDir, "home", workspace.MetaDir, "workdir.json"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	second := durableEnv(t, st, storeDir)
	two := second.turn(t, req{session: "s", messages: []string{"exec pwd\nsay remember heron", one.res.Output, "history"}})
	if two.mode != "load" || !strings.Contains(two.res.Output, "history 1:") {
		t.Fatalf("second runner: mode %q, output:\n%s", two.mode, two.res.Output)
	}
}

// TestWorkspaceDeletionsReachTheStore: a file removed in one turn does
// not come back in a fresh sandbox.
func TestWorkspaceDeletionsReachTheStore(t *testing.T) {
	st := sharedStore(t)
	storeDir := t.TempDir()
	e := durableEnv(t, st, storeDir)
	e.turn(t, req{session: "s", messages: []string{"exec echo a > a.txt && echo b > b.txt"}})
	e.turn(t, req{session: "s", messages: []string{"exec rm a.txt"}})
	_ = e.svc.Shutdown(context.Background())
	e2 := durableEnv(t, st, storeDir)
	got := e2.turn(t, req{session: "s", messages: []string{"exec ls"}}).res.Output
	if strings.Contains(got, "a.txt") || !strings.Contains(got, "b.txt") {
		t.Fatalf("fresh sandbox lists:\n%s", got)
	}
}

func agentReq(session, agentID string, msg string) *wire.Request {
	w := req{session: session, messages: []string{msg}}.wire()
	w.RunContext = &wire.RunContext{Workflow: json.RawMessage(`{"artifact":{"id":"` + agentID + `"}}`)}
	return w
}

// TestAgentFolderIsSharedBySessions: the agent's folder, reached through
// the agent-files symlink and AGENTA_AGENT_MOUNT_DIR, carries files from
// one session of the agent to another.
func TestAgentFolderIsSharedBySessions(t *testing.T) {
	st := sharedStore(t)
	e := durableEnv(t, st, t.TempDir())
	one := collect(t, e.svc, agentReq("a", "agent-7", "exec echo shared > agent-files/note.txt && echo mount=$AGENTA_AGENT_MOUNT_DIR && readlink agent-files"))
	out := one.res.Output
	if !strings.Contains(out, "exec exit 0") || !strings.Contains(out, "mount=/") || !strings.Contains(out, "-agent\n") {
		t.Fatalf("first session: %q", out)
	}
	two := collect(t, e.svc, agentReq("b", "agent-7", "read agent-files/note.txt"))
	if !strings.Contains(two.res.Output, "read ok: shared") {
		t.Fatalf("second session of the agent: %q", two.res.Output)
	}
	other := collect(t, e.svc, agentReq("c", "agent-8", "read agent-files/note.txt"))
	if strings.Contains(other.res.Output, "read ok") {
		t.Fatalf("another agent sees the folder: %q", other.res.Output)
	}
}

// TestFinalCheckpointFailureFailsTheTurn: the store breaks during the
// turn; the turn fails with an error naming it, not a log line.
func TestFinalCheckpointFailureFailsTheTurn(t *testing.T) {
	st := sharedStore(t)
	storeDir := filepath.Join(t.TempDir(), "store")
	e := durableEnv(t, st, storeDir)
	e.turn(t, req{session: "s", messages: []string{"exec echo v1 > f.txt"}})
	// The agent breaks the store (a file where its directory was), then
	// writes: the end-of-turn checkpoint cannot land.
	res, err := e.svc.Run(t.Context(), req{session: "s", messages: []string{"exec rm -rf " + storeDir + " && touch " + storeDir + " && echo v2 > f.txt"}}.wire(), nil)
	if err == nil || res.OK {
		t.Fatalf("turn whose checkpoint failed succeeded: %+v", res)
	}
	if !errors.Is(err, workspace.ErrStore) || !strings.Contains(err.Error(), storeDir) {
		t.Fatalf("error %v: want a store error naming %s", err, storeDir)
	}
	var sawError bool
	for _, ev := range res.Events {
		if ev.Type == wire.EventError && strings.Contains(ev.Message, storeDir) {
			sawError = true
		}
	}
	if !sawError {
		t.Fatalf("no error event names the store: %+v", res.Events)
	}
}

// TestMidTurnCheckpoint: files written during a long turn reach the store
// before it ends; a store that breaks mid-turn stops the turn with the
// cause instead of letting it write into the void.
func TestMidTurnCheckpoint(t *testing.T) {
	st := sharedStore(t)
	storeDir := filepath.Join(t.TempDir(), "store")
	e := durableEnv(t, st, storeDir, func(c *runner.Config) { c.CheckpointEvery = 20 * time.Millisecond })
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Run(context.Background(), req{session: "s", messages: []string{
			"exec (for i in $(seq 600); do echo $i > tick.txt; sleep 0.1; done) >/dev/null 2>&1 &\nsleep 60s"}}.wire(), nil)
		done <- err
	}()
	waitFor(t, func() bool {
		_, err := os.Stat(filepath.Join(storeDir, "sessions/p/s/tick.txt"))
		return err == nil
	})
	// Break the store in one step: a RemoveAll races the checkpointer,
	// which keeps writing into the tree being removed.
	if err := os.Rename(storeDir, storeDir+".gone"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(storeDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, workspace.ErrStore) || !strings.Contains(err.Error(), storeDir) {
			t.Fatalf("turn ended with %v, want the store error naming %s", err, storeDir)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the turn kept running on a broken store")
	}
}

// TestDaytonaWorkspaceSurvivesDeletedSandbox: the session's sandbox is
// deleted; the next turn runs in a fresh one with every file back (moved
// through sandboxd, the store is never reachable from the sandbox) and
// the harness reloads its transcript natively.
func TestDaytonaWorkspaceSurvivesDeletedSandbox(t *testing.T) {
	fake := daytonatest.New(t, daytonatest.Options{})
	base, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newRemoteEnv(t, fake, nil, func(c *runner.Config) {
		c.Workspaces = workspace.Configured{Base: base}
		c.Harnesses["fake"] = agent.Spec{Command: agenttest.Command(), StateDirs: []string{agenttest.StateDir}, KeyedDirs: agenttest.KeyedDirs()}
	})
	msgs := []string{"exec echo kept > notes.txt && mkdir -p src/empty && printf '#!/bin/sh\\n' > run.sh && chmod 750 run.sh && ln -s notes.txt link && head -c 300000 /dev/urandom > big.bin && sha256sum big.bin\nsay remember otter"}
	first := e.turn(t, req{session: "s", messages: msgs}.wire())
	if !strings.Contains(first.res.Output, "exec exit 0") {
		t.Fatalf("first turn: %q", first.res.Output)
	}
	sum := strings.Fields(first.res.Output[strings.Index(first.res.Output, "exec exit 0")+len("exec exit 0"):])[0]
	watches := 0
	for _, c := range fake.Calls() {
		if c.Method == "POST" && strings.HasSuffix(c.Path, "/v1/tree/watch") {
			watches++
		}
	}
	if watches == 0 {
		t.Error("the workspace was not checkpointed through sandboxd's tree watch")
	}
	sess, _ := e.st.GetSession(t.Context(), sk("s"))
	e.svc.Kill(t.Context(), "s", "p")
	fake.Remove(sess.SandboxID)
	if _, ok := fake.Sandbox(sess.SandboxID); ok {
		t.Fatal("sandbox still there")
	}
	msgs = append(msgs, first.res.Output, "read notes.txt\nexec ls -l --time-style=+ run.sh link; test -d src/empty && echo empty-dir-kept; sha256sum big.bin\nhistory")
	second := e.turn(t, req{session: "s", messages: msgs}.wire())
	if second.mode != "load" {
		t.Fatalf("fresh sandbox: mode %q, want load", second.mode)
	}
	for _, want := range []string{"read ok: kept", "-rwxr-x---", "link -> notes.txt", "empty-dir-kept", sum, "remember otter"} {
		if !strings.Contains(second.res.Output, want) {
			t.Errorf("fresh sandbox's turn lacks %q:\n%s", want, second.res.Output)
		}
	}
}

func TestDeleteSessionRemovesItsWorkspace(t *testing.T) {
	st := sharedStore(t)
	storeDir := t.TempDir()
	e := durableEnv(t, st, storeDir)
	collect(t, e.svc, agentReq("s", "agent-1", "exec echo a > a.txt && echo shared > agent-files/n.txt"))
	if _, err := os.Stat(filepath.Join(storeDir, "sessions/p/s/a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteSession(t.Context(), sk("s")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(storeDir, "sessions/p/s")); !os.IsNotExist(err) {
		t.Fatalf("session files outlived DELETE: %v", err)
	}
	if _, err := os.Stat(filepath.Join(storeDir, "agents/p/agent-1/n.txt")); err != nil {
		t.Fatalf("the agent folder went with one of its sessions: %v", err)
	}
}

// TestDaytonaAgentFolder: on Daytona the working directory is $HOME, so
// the agent folder lives inside it (out of the workspace's own sync) and
// still reaches the agent's other sessions.
func TestDaytonaAgentFolder(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end turns over the fake Daytona API: skipped under -short")
	}
	fake := daytonatest.New(t, daytonatest.Options{})
	base, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newRemoteEnv(t, fake, nil, func(c *runner.Config) { c.Workspaces = workspace.Configured{Base: base} })
	one := e.turn(t, agentReq("a", "agent-9", "exec echo shared > agent-files/n.txt && echo mount=$AGENTA_AGENT_MOUNT_DIR"))
	if !strings.Contains(one.res.Output, "exec exit 0") || !strings.Contains(one.res.Output, "/.agenta-agent") {
		t.Fatalf("first session: %q", one.res.Output)
	}
	two := e.turn(t, agentReq("b", "agent-9", "read agent-files/n.txt"))
	if !strings.Contains(two.res.Output, "read ok: shared") {
		t.Fatalf("second session: %q", two.res.Output)
	}
	keys, _ := base.List(t.Context(), "sessions/p/a/")
	for _, k := range keys {
		if strings.Contains(k, ".agenta-agent") {
			t.Fatalf("the agent folder was synced into the session's workspace: %s", k)
		}
		// The uploaded daemon binary (tens of MB, the runner's own) is
		// not the session's work.
		if strings.Contains(k, ".runner/") || strings.Contains(k, ".runner-sandboxd/") {
			t.Fatalf("the runner's own files were synced into the session's workspace: %s", k)
		}
	}
}
