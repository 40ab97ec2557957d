// Package sandboxtest is the conformance suite of the sandbox family: every
// sandbox.Provider runs Run from its own tests and is done when it passes.
// The suite uses only the sandbox interfaces and POSIX sh, cat, sleep, pwd
// and env inside the sandbox, so it fits local and remote providers alike.
package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
)

// Run checks the contract of sandbox.Provider, Sandbox and Process against
// the providers newProvider returns. newProvider may return the same
// provider every time; subtests run in parallel.
func Run(t *testing.T, newProvider func(t *testing.T) sandbox.Provider) {
	tests := []struct {
		name string
		fn   func(t *testing.T, p sandbox.Provider)
	}{
		{"Info", testInfo},
		{"Stdout", testStdout},
		{"Stdin", testStdin},
		{"ExitCode", testExitCode},
		{"StderrTail", testStderrTail},
		{"Environment", testEnvironment},
		{"PathLookup", testPathLookup},
		{"Workdir", testWorkdir},
		{"WriteFile", testWriteFile},
		{"WriteFileOutside", testWriteFileOutside},
		{"HomeWritable", testHomeWritable},
		{"Kill", testKill},
		{"CancelKills", testCancelKills},
		{"Destroy", testDestroy},
		{"SeparateSandboxes", testSeparate},
		{"StateKey", testStateKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newProvider(t))
		})
	}
}

// create makes a sandbox destroyed at the end of the test.
func create(t *testing.T, p sandbox.Provider) sandbox.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), sandbox.Spec{SessionID: "sandboxtest-" + t.Name()})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb
}

// Env is the environment the suite gives processes.
func Env(sb sandbox.Sandbox) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + sb.Info().Home, "LANG=C"}
}

// Sh runs script with sh -c and returns its stdout and Wait's error.
func Sh(t *testing.T, sb sandbox.Sandbox, script string) (string, error) {
	t.Helper()
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", script}, Env: Env(sb)})
	if err != nil {
		t.Fatalf("Start %q: %v", script, err)
	}
	proc.Stdin().Close()
	out, rerr := io.ReadAll(proc.Stdout())
	if rerr != nil {
		t.Errorf("read stdout: %v", rerr)
	}
	err = proc.Wait()
	if err != nil {
		t.Logf("%q: %v; stderr: %s", script, err, proc.StderrTail())
	}
	return string(out), err
}

func testInfo(t *testing.T, p sandbox.Provider) {
	a, b := create(t, p), create(t, p)
	ia := a.Info()
	if ia.ID == "" || ia.Workdir == "" || ia.Home == "" || ia.Isolation == "" {
		t.Errorf("Info has empty fields: %+v", ia)
	}
	if ia.Provider != p.Name() {
		t.Errorf("Info().Provider = %q, want %q", ia.Provider, p.Name())
	}
	if ia.ID == b.Info().ID {
		t.Errorf("two sandboxes share ID %q", ia.ID)
	}
	if diff := cmp.Diff(ia, a.Info()); diff != "" {
		t.Errorf("Info changed (-first +second):\n%s", diff)
	}
}

func testStdout(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	out, err := Sh(t, sb, "echo hello; echo world")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("hello\nworld\n", out); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
}

func testStdin(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/cat", Env: Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	msg := strings.Repeat("line of input\n", 1000)
	go func() {
		_, _ = io.WriteString(proc.Stdin(), msg)
		proc.Stdin().Close()
	}()
	out, err := io.ReadAll(proc.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	if string(out) != msg {
		t.Errorf("cat echoed %d bytes, want %d", len(out), len(msg))
	}
}

func testExitCode(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	_, err := Sh(t, sb, "exit 3")
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Wait = %v, want *sandbox.ExitError", err)
	}
	if diff := cmp.Diff(&sandbox.ExitError{Code: 3}, ee); diff != "" {
		t.Errorf("ExitError (-want +got):\n%s", diff)
	}
	if _, err := Sh(t, sb, "exit 0"); err != nil {
		t.Errorf("exit 0: Wait = %v", err)
	}
}

func testStderrTail(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "echo first >&2; echo oops >&2; exit 1"}, Env: Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, proc.Stdout())
	if err := proc.Wait(); err == nil {
		t.Fatal("Wait = nil, want an exit error")
	}
	if got := proc.StderrTail(); !strings.HasSuffix(got, "oops") {
		t.Errorf("StderrTail = %q, want it to end with oops", got)
	}
}

// providerEnv are variables a provider may add to Cmd.Env: the private
// $HOME when Cmd.Env has none, TMPDIR, the working directory.
var providerEnv = []string{"HOME", "TMPDIR", "PWD"}

func testEnvironment(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	given := []string{"PATH=/usr/bin:/bin", "GIVEN=yes"}
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/usr/bin/env", Env: given})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(proc.Stdout())
	if err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	vars := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, kv := range given {
		if !slices.Contains(vars, kv) {
			t.Errorf("env lacks %s (control): %q", kv, vars)
		}
	}
	for _, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(given, kv) && !slices.Contains(providerEnv, k) {
			t.Errorf("env has %q, which Cmd.Env did not give", kv)
		}
	}
}

func testPathLookup(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "sh", Args: []string{"-c", "echo found"}, Env: Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(proc.Stdout())
	if err := proc.Wait(); err != nil || string(out) != "found\n" {
		t.Errorf("sh by name: out %q, Wait %v", out, err)
	}
	_, err = sb.Start(t.Context(), sandbox.Cmd{Path: "no-such-program-sandboxtest", Env: Env(sb)})
	if err == nil {
		t.Error("Start of a missing program succeeded")
	}
}

func testWorkdir(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	out, err := Sh(t, sb, "pwd -P")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != sb.Info().Workdir {
		t.Errorf("default dir = %q, want Info().Workdir %q", got, sb.Info().Workdir)
	}
	if err := sb.WriteFile(t.Context(), sb.Info().Workdir+"/sub/x", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "pwd -P"}, Env: Env(sb), Dir: sb.Info().Workdir + "/sub"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(proc.Stdout())
	if err := proc.Wait(); err != nil || strings.TrimSpace(string(got)) != sb.Info().Workdir+"/sub" {
		t.Errorf("Cmd.Dir: pwd = %q, Wait %v", got, err)
	}
}

func testWriteFile(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	for _, path := range []string{sb.Info().Workdir + "/a/b/file.txt", sb.Info().Home + "/.config/tool.json"} {
		if err := sb.WriteFile(t.Context(), path, []byte("content of "+path), 0o600); err != nil {
			t.Fatalf("WriteFile %s: %v", path, err)
		}
		out, err := Sh(t, sb, "cat '"+path+"'")
		if err != nil || out != "content of "+path {
			t.Errorf("cat %s = %q, %v", path, out, err)
		}
	}
}

func testWriteFileOutside(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	for _, path := range []string{"/etc/sandboxtest", sb.Info().Workdir + "/../escape", "relative/path"} {
		err := sb.WriteFile(t.Context(), path, []byte("x"), 0o644)
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("WriteFile %s = %v, want ErrInvalid", path, err)
		}
	}
}

func testHomeWritable(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	out, err := Sh(t, sb, `echo data > "$HOME/f" && cat "$HOME/f" && f="${TMPDIR:-/tmp}/sandboxtest-$$" && echo tmp > "$f" && cat "$f" && rm "$f"`)
	if err != nil || out != "data\ntmp\n" {
		t.Errorf("write to $HOME and /tmp: out %q, Wait %v", out, err)
	}
}

func testKill(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	// The child sleep must die too: the process's stdout closes only when
	// every holder of it is gone.
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "sleep 1000 & echo started; wait"}, Env: Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("started\n"))
	if _, err := io.ReadFull(proc.Stdout(), line); err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, proc.Stdout()); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(); err == nil {
		t.Error("Wait after Kill = nil, want an error")
	}
	if err := proc.Kill(); err != nil {
		t.Errorf("second Kill = %v", err)
	}
}

func testCancelKills(t *testing.T, p sandbox.Provider) {
	sb := create(t, p)
	ctx, cancel := context.WithCancel(t.Context())
	proc, err := sb.Start(ctx, sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 1000"}, Env: Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("started\n"))
	if _, err := io.ReadFull(proc.Stdout(), line); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := proc.Wait(); err == nil {
		t.Error("Wait after cancel = nil, want an error")
	}
}

func testDestroy(t *testing.T, p sandbox.Provider) {
	sb, err := p.Create(t.Context(), sandbox.Spec{SessionID: "sandboxtest-destroy"})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 1000"}, Env: Env(sb)})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("started\n"))
	if _, err := io.ReadFull(proc.Stdout(), line); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := proc.Wait(); err == nil {
		t.Error("a process survived Destroy")
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := sb.Start(t.Context(), sandbox.Cmd{Path: "/bin/true", Env: Env(sb)}); err == nil {
		t.Error("Start after Destroy succeeded")
	}
}

func testSeparate(t *testing.T, p sandbox.Provider) {
	a, b := create(t, p), create(t, p)
	if err := a.WriteFile(t.Context(), a.Info().Workdir+"/mine", []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Sh(t, b, "ls -A")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains([]byte(out), []byte("mine")) {
		t.Errorf("sandbox b sees sandbox a's file in its workdir: %q", out)
	}
}

// testStateKey checks that a provider implementing sandbox.StateRemover
// keeps the workspace and $HOME of a Spec.StateKey across sandboxes, apart
// from other keys, until RemoveState.
func testStateKey(t *testing.T, p sandbox.Provider) {
	r, ok := p.(sandbox.StateRemover)
	if !ok {
		t.Skip("provider keeps no state across sandboxes")
	}
	key := "sandboxtest:" + t.Name()
	withKey := func(key string) sandbox.Sandbox {
		sb, err := p.Create(t.Context(), sandbox.Spec{SessionID: "sandboxtest", StateKey: key})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		t.Cleanup(func() { _ = sb.Destroy(context.WithoutCancel(t.Context())) })
		return sb
	}
	t.Cleanup(func() { _ = r.RemoveState(context.WithoutCancel(t.Context()), key) })
	first := withKey(key)
	if _, err := Sh(t, first, `echo w > kept && echo h > "$HOME/kept"`); err != nil {
		t.Fatal(err)
	}
	if err := first.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	second := withKey(key)
	if out, err := Sh(t, second, `cat kept "$HOME/kept"`); err != nil || out != "w\nh\n" {
		t.Errorf("state after Destroy: %q, %v; want both files kept", out, err)
	}
	if out, err := Sh(t, withKey(key+"-other"), `cat kept`); err == nil {
		t.Errorf("another key sees this key's workspace: %q", out)
	}
	if err := second.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveState(t.Context(), key); err != nil {
		t.Fatalf("RemoveState: %v", err)
	}
	if err := r.RemoveState(t.Context(), key); err != nil {
		t.Errorf("second RemoveState: %v", err)
	}
	if out, err := Sh(t, withKey(key), `cat kept`); err == nil {
		t.Errorf("state survived RemoveState: %q", out)
	}
}
