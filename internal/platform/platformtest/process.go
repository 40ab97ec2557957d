package platformtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// processArg is the argument that turns a test binary into a fake
// platform serving on its own (ServeProcess).
const processArg = "__fake_agenta_platform__"

// MaybeServe serves the fake platform and exits when the process was
// started by ServeProcess; otherwise it returns. Call it first in
// TestMain.
func MaybeServe() {
	if len(os.Args) < 3 || os.Args[1] != processArg {
		return
	}
	f := start(os.Args[2])
	fmt.Println(f.URL)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	f.srv.Close()
	os.Exit(0)
}

// ServeProcess starts the fake platform in a process of its own (the
// test binary again, whose TestMain calls MaybeServe), so its HTTP work
// is not on the test process's Go scheduler, and returns its URL. The
// process cannot be inspected or switched: use New for that.
func ServeProcess(t testing.TB, cred string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, processArg, cred)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("fake platform process: %v", err)
	}
	return strings.TrimSpace(line)
}
