package local_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// Tests of Config.SandboxUID: sandboxes of a root runner running as an
// unprivileged host user.

func TestRunAs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end sandboxes per user: skipped under -short")
	}
	t.Parallel()
	runAs := newRunAs(t)
	asRoot := newBwrap(t, nil)
	dir, err := os.MkdirTemp("/var/tmp", "escape-runas-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	secret := filepath.Join(dir, "root-only")
	if err := os.WriteFile(secret, []byte("ROOT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	// The gap a sandbox uid closes: a root runner's sandbox reads root-only
	// files that are not hidden.
	if out, err := sandboxtest.Sh(t, createSpec(t, asRoot, sandbox.Spec{}), "cat "+secret); err != nil || out != "ROOT" {
		t.Logf("root's sandbox reading %s: %q, %v (expected to succeed)", secret, out, err)
	}
	sb := createSpec(t, runAs, sandbox.Spec{})
	if out, err := sandboxtest.Sh(t, sb, "cat "+secret); err == nil {
		t.Errorf("sandbox user read a root-only file: %q", out)
	}
	if out, err := sandboxtest.Sh(t, sb, "id -u; id -g; grep CapEff /proc/self/status"); err != nil || out != "65534\n65534\nCapEff:\t0000000000000000\n" {
		t.Errorf("identity inside = %q, %v; want 65534 without capabilities", out, err)
	}
	// Controls: what the runner writes stays writable for the sandbox.
	if err := sb.WriteFile(t.Context(), sb.Info().Workdir+"/dir/given", []byte("G"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := sandboxtest.Sh(t, sb, `echo more >> dir/given && cat dir/given && echo new > dir/new && echo h > "$HOME/h"`); err != nil || out != "Gmore\n" {
		t.Errorf("write in the workspace as the sandbox user: %q, %v", out, err)
	}
	out, err := run(t, sb, nil, "syscalls")
	if err != nil || !strings.Contains(out, "clone-newuser operation not permitted") || !strings.Contains(out, "unshare operation not permitted") {
		t.Errorf("seccomp as the sandbox user: %q, %v", out, err)
	}
}

func TestRunAsAllowlist(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "listed") }))
	t.Cleanup(srv.Close)
	p := newRunAsWith(t, func(c *local.Config) { c.NetAllow = []string{srv.Listener.Addr().String()} })
	sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "allowlist", Allow: []string{srv.Listener.Addr().String()}}})
	if out, err := run(t, sb, nil, "http-get", srv.URL); err != nil || out != "200 listed" {
		t.Errorf("listed host as the sandbox user: %q, %v", out, err)
	}
	if out, err := run(t, sb, nil, "http-get", "http://unlisted.example.invalid/"); err != nil || !strings.HasPrefix(out, "403 ") {
		t.Errorf("unlisted host as the sandbox user: %q, %v", out, err)
	}
}

func TestRunAsBinds(t *testing.T) {
	t.Parallel()
	p := newRunAs(t)
	ro := t.TempDir() // 0700, root's: bwrap binds it as root
	plant(t, ro+"/tool", "TOOL")
	sock := filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox user must be allowed to connect, as the runner's tool
	// relay socket must be.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "relay")
			c.Close()
		}
	})
	sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}, Binds: []sandbox.Bind{{Path: ro}, {Path: sock}}})
	if out, err := sandboxtest.Sh(t, sb, "cat "+ro+"/tool"); err != nil || out != "TOOL" {
		t.Errorf("read-only bind as the sandbox user: %q, %v", out, err)
	}
	if out, err := run(t, sb, nil, "dial-unix", sock); err != nil || out != "relay\n" {
		t.Errorf("relay socket as the sandbox user: %q, %v", out, err)
	}
}
