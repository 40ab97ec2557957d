package local_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/sandbox/sandboxtest"
)

// Escape tests: each tries a way out of a bwrap sandbox, asserts that it is
// blocked, and runs a control that must succeed, so a test cannot pass by
// everything failing.

func createSpec(t *testing.T, p *local.Provider, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(t.Context()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb
}

// run starts the test binary's helper name inside sb.
func run(t *testing.T, sb sandbox.Sandbox, env []string, name string, args ...string) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: exe, Args: append([]string{name}, args...), Env: append(sandboxtest.Env(sb), env...)})
	if err != nil {
		t.Fatalf("Start %s: %v", name, err)
	}
	out, _ := io.ReadAll(proc.Stdout())
	err = proc.Wait()
	if err != nil {
		t.Logf("%s %v: %v; stderr: %s", name, args, err, proc.StderrTail())
	}
	return string(out), err
}

func plant(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEscapeReadOutside(t *testing.T) {
	t.Parallel()
	// A directory outside /tmp, since the sandbox's private /tmp would hide
	// a t.TempDir() file anyway: one hidden by Config.Hide, one not (the
	// control: the host root is readable).
	outside, err := os.MkdirTemp("/var/tmp", "escape-read-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	secret, public := filepath.Join(outside, "secret", "key"), filepath.Join(outside, "public", "readme")
	plant(t, secret, "SECRET")
	plant(t, public, "PUBLIC")
	hostTmp := filepath.Join(t.TempDir(), "tmpfile")
	plant(t, hostTmp, "HOSTTMP")

	p := newBwrap(t, func(c *local.Config) { c.Hide = []string{filepath.Dir(secret)} })
	sb := createSpec(t, p, sandbox.Spec{})
	if err := sb.WriteFile(t.Context(), sb.Info().Workdir+"/mine", []byte("MINE"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want string // empty: must fail
	}{
		{sb.Info().Workdir + "/mine", "MINE"},
		{public, "PUBLIC"},
		{"/etc/passwd", "*"},
		{secret, ""},
		{hostTmp, ""},
		{"/root/.bashrc", ""},
	} {
		out, err := sandboxtest.Sh(t, sb, "cat "+tc.path)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("read %s: got %q, want it hidden", tc.path, out)
		case tc.want != "" && err != nil:
			t.Errorf("read %s (control): %v", tc.path, err)
		case tc.want != "" && tc.want != "*" && out != tc.want:
			t.Errorf("read %s (control) = %q, want %q", tc.path, out, tc.want)
		}
	}
	// The data dir holds other state of the runner: only this sandbox's
	// own directories show through it.
	out, err := sandboxtest.Sh(t, sb, "ls -A "+filepath.Dir(sb.Info().Workdir))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("home\nwork\nwork-agent\n", out); diff != "" { // work-agent: the agent folder
		t.Errorf("sandbox dir as seen inside (-want +got):\n%s", diff)
	}
}

func TestEscapeOtherSandbox(t *testing.T) {
	t.Parallel()
	p := newBwrap(t, nil)
	a, b := createSpec(t, p, sandbox.Spec{}), createSpec(t, p, sandbox.Spec{})
	file := a.Info().Workdir + "/private"
	if err := a.WriteFile(t.Context(), file, []byte("A"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := sandboxtest.Sh(t, a, "cat "+file); err != nil || out != "A" {
		t.Errorf("a reads its own file (control): %q, %v", out, err)
	}
	if out, err := sandboxtest.Sh(t, b, "cat "+file); err == nil {
		t.Errorf("b read a's workspace: %q", out)
	}
	if out, err := sandboxtest.Sh(t, b, "ls "+filepath.Dir(filepath.Dir(a.Info().Workdir))); err == nil && strings.Contains(out, a.Info().ID) {
		t.Errorf("b lists a's sandbox: %q", out)
	}
}

func TestEscapeWrite(t *testing.T) {
	t.Parallel()
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{})
	dataDir := filepath.Dir(filepath.Dir(filepath.Dir(sb.Info().Workdir)))
	for _, path := range []string{"/usr/escape", "/etc/escape", "/var/tmp/escape-" + sb.Info().ID} {
		if _, err := sandboxtest.Sh(t, sb, "echo x > "+path); err == nil {
			t.Errorf("wrote %s", path)
		}
		if _, err := os.Stat(path); err == nil {
			os.Remove(path)
			t.Errorf("%s exists on the host", path)
		}
	}
	// Masked and private paths take writes that never reach the host.
	for _, path := range []string{dataDir + "/escape", "/tmp/escape-" + sb.Info().ID} {
		_, _ = sandboxtest.Sh(t, sb, "echo x > "+path)
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s written from the sandbox exists on the host", path)
		}
	}
	// Controls: the workspace and $HOME are writable and shared with the host.
	if _, err := sandboxtest.Sh(t, sb, `echo w > work.txt && echo h > "$HOME/home.txt"`); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{sb.Info().HostWorkdir + "/work.txt": "w\n", sb.Info().Home + "/home.txt": "h\n"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("host %s = %q, %v; want %q", path, got, err, want)
		}
	}
}

func TestReadOnlyWorkspace(t *testing.T) {
	t.Parallel()
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{ReadOnly: true})
	if err := sb.WriteFile(t.Context(), sb.Info().Workdir+"/given", []byte("G"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := sandboxtest.Sh(t, sb, "cat given"); err != nil || out != "G" {
		t.Errorf("read in a read-only workspace (control): %q, %v", out, err)
	}
	if _, err := sandboxtest.Sh(t, sb, "echo x > new"); err == nil {
		t.Error("wrote in a read-only workspace")
	}
	if _, err := sandboxtest.Sh(t, sb, `echo x > "$HOME/ok"`); err != nil {
		t.Errorf("write $HOME with a read-only workspace (control): %v", err)
	}
}

func TestEscapeProcesses(t *testing.T) {
	t.Parallel()
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{})
	out, err := sandboxtest.Sh(t, sb, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(out, "/bin/sh -c") {
		t.Errorf("own shell not listed (control): %q", lines)
	}
	// bwrap's init, the shell, and the shell's children for tr.
	if len(lines) > 4 {
		t.Errorf("sandbox sees %d processes, want only its own: %q", len(lines), lines)
	}
	if exe, _ := os.Executable(); strings.Contains(out, exe) {
		t.Errorf("sandbox sees the runner (test binary): %q", lines)
	}
}

// listen opens a host loopback listener that greets every connection.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
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
			fmt.Fprintln(c, "hello from the host")
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestEscapeNetworkOff(t *testing.T) {
	t.Parallel()
	addr := listen(t)
	p := newBwrap(t, nil)
	off := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
	if out, err := run(t, off, nil, "dial", addr); err == nil {
		t.Errorf("network off reached the host loopback: %q", out)
	}
	on := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "on"}})
	if out, err := run(t, on, nil, "dial", addr); err == nil {
		t.Errorf("network on reached the host loopback: %q", out)
	}
	host := newBwrap(t, func(c *local.Config) { c.Network = local.NetworkHost })
	shared := createSpec(t, host, sandbox.Spec{Network: sandbox.Network{Mode: "on"}})
	if out, err := run(t, shared, nil, "dial", addr); err != nil || out != "hello from the host\n" {
		t.Errorf("network on with AGENTA_RUNNER_LOCAL_NETWORK=host (control): %q, %v", out, err)
	}
}

func TestEscapeNetworkAllowlist(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "listed") }))
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "listed tls") }))
	t.Cleanup(tlsSrv.Close)
	unlisted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "unlisted") }))
	t.Cleanup(unlisted.Close)
	// Listed by the request only: on the host's loopback, so refused at
	// dial time although the allowlist names it.
	requestOnly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "request only") }))
	t.Cleanup(requestOnly.Close)
	direct := listen(t)

	var mu sync.Mutex
	var events []map[string]any
	// The test's servers are on loopback: the operator opens them.
	p := newBwrap(t, func(c *local.Config) {
		c.NetAllow = []string{srv.Listener.Addr().String(), tlsSrv.Listener.Addr().String()}
	})
	sb := createSpec(t, p, sandbox.Spec{
		Network: sandbox.Network{Mode: "allowlist", Allow: []string{srv.Listener.Addr().String(), "https://" + tlsSrv.Listener.Addr().String(), "*.example.invalid", requestOnly.Listener.Addr().String()}},
		OnEvent: func(name string, data map[string]any) {
			mu.Lock()
			defer mu.Unlock()
			if name == "network.blocked" {
				events = append(events, data)
			}
		},
	})
	if out, err := run(t, sb, nil, "http-get", srv.URL); err != nil || out != "200 listed" {
		t.Errorf("listed host over http (control): %q, %v", out, err)
	}
	if out, err := run(t, sb, nil, "http-get", tlsSrv.URL); err != nil || out != "200 listed tls" {
		t.Errorf("listed host over CONNECT (control): %q, %v", out, err)
	}
	out, err := run(t, sb, nil, "http-get", unlisted.URL)
	if err != nil || !strings.HasPrefix(out, "403 ") {
		t.Errorf("unlisted host: %q, %v; want 403 from the proxy", out, err)
	}
	if out, err := run(t, sb, nil, "dial", direct); err == nil {
		t.Errorf("allowlist sandbox reached the host loopback without the proxy: %q", out)
	}
	mu.Lock()
	host, _, _ := net.SplitHostPort(unlisted.Listener.Addr().String())
	if len(events) != 1 || events[0]["host"] != host {
		t.Errorf("network.blocked events = %v, want one for %s", events, host)
	}
	mu.Unlock()
	// The request's own loopback entries (a host:port) open
	// nothing of the host: the proxy refuses the address it would dial.
	if out, err := run(t, sb, nil, "http-get", requestOnly.URL); err != nil || !strings.HasPrefix(out, "403 ") {
		t.Errorf("loopback service listed by the request only: %q, %v; want 403 from the proxy", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[1]["reason"] != "refused address" {
		t.Errorf("network.blocked events = %v, want a second one for the refused address", events)
	}
	for _, kv := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if out, _ := sandboxtest.Sh(t, sb, "echo $"+kv); strings.TrimSpace(out) == "" {
			t.Errorf("%s is not set", kv)
		}
	}
}

func TestSeccomp(t *testing.T) {
	t.Parallel()
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{})
	out, err := run(t, sb, nil, "syscalls")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, res, _ := strings.Cut(line, " ")
		got[name] = res
	}
	want := map[string]string{
		"getpid": "ok", "mkdir": "ok", // controls
		"mount": "operation not permitted", "unshare": "operation not permitted",
		"ptrace": "operation not permitted", "bpf": "operation not permitted",
		"keyctl": "operation not permitted", "perf_event_open": "operation not permitted",
		"clone-newuser":     "operation not permitted",
		"personality-query": "ok", "personality-no-aslr": "operation not permitted",
		"tiocsti": "operation not permitted", "ioctl-fionread": "ok",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("syscalls (-want +got):\n%s", diff)
	}
	if out, _ := sandboxtest.Sh(t, sb, "grep Seccomp: /proc/self/status"); !strings.Contains(out, "2") {
		t.Errorf("/proc/self/status: %q, want Seccomp: 2", out)
	}
}

func TestBinds(t *testing.T) {
	t.Parallel()
	ro, rw := t.TempDir(), t.TempDir()
	plant(t, ro+"/tool", "TOOL")
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{Binds: []sandbox.Bind{{Path: ro}, {Path: rw, Writable: true}}})
	if out, err := sandboxtest.Sh(t, sb, "cat "+ro+"/tool"); err != nil || out != "TOOL" {
		t.Errorf("read-only bind (control): %q, %v", out, err)
	}
	if _, err := sandboxtest.Sh(t, sb, "echo x > "+ro+"/new"); err == nil {
		t.Error("wrote into a read-only bind")
	}
	if _, err := sandboxtest.Sh(t, sb, "echo x > "+rw+"/new"); err != nil {
		t.Errorf("write into a writable bind: %v", err)
	}
	if _, err := os.Stat(rw + "/new"); err != nil {
		t.Errorf("writable bind: %v", err)
	}
	if _, err := p.Create(t.Context(), sandbox.Spec{Binds: []sandbox.Bind{{Path: "/nonexistent/bind"}}}); err == nil {
		t.Error("Create with a missing bind succeeded")
	}
}

func TestEscapeDataDir(t *testing.T) {
	t.Parallel()
	// A data dir outside /tmp, as in production, so the mask over it (not
	// the private /tmp) is what hides it.
	data, err := os.MkdirTemp("/var/tmp", "escape-data-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	plant(t, data+"/credentials.json", "CREDENTIALS")
	p := newBwrap(t, func(c *local.Config) { c.DataDir, c.Dir = data, data+"/sandboxes" })
	a, b := createSpec(t, p, sandbox.Spec{}), createSpec(t, p, sandbox.Spec{})
	if err := a.WriteFile(t.Context(), a.Info().Workdir+"/private", []byte("A"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := sandboxtest.Sh(t, a, "cat "+a.Info().Workdir+"/private"); err != nil || out != "A" {
		t.Errorf("own workspace (control): %q, %v", out, err)
	}
	for _, path := range []string{data + "/credentials.json", a.Info().Workdir + "/private"} {
		if out, err := sandboxtest.Sh(t, b, "cat "+path); err == nil {
			t.Errorf("read %s: %q", path, out)
		}
	}
	if out, err := sandboxtest.Sh(t, b, "ls -A "+data); err != nil || out != "sandboxes\n" {
		t.Errorf("data dir as seen inside = %q, %v; want only the way to its own sandbox", out, err)
	}
}

func TestNoInheritedDescriptors(t *testing.T) {
	// Not parallel: it opens a descriptor without close-on-exec, as a
	// runner started by a careless parent would have, before New.
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{})
	out, err := sandboxtest.Sh(t, sb, "ls /proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	// stdio, and the directory ls reads.
	if got := strings.Fields(out); len(got) > 4 || !slices.Contains(got, "2") {
		t.Errorf("descriptors inside = %q, want stdio only", got)
	}
}

func TestBindUnixSocket(t *testing.T) {
	t.Parallel()
	// The tool relay reaches the runner over a bound unix socket, also
	// with network "off".
	sock := filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
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
	p := newBwrap(t, nil)
	bound := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}, Binds: []sandbox.Bind{{Path: sock}}})
	if out, err := run(t, bound, nil, "dial-unix", sock); err != nil || out != "relay\n" {
		t.Errorf("bound relay socket (control): %q, %v", out, err)
	}
	unbound := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
	if out, err := run(t, unbound, nil, "dial-unix", sock); err == nil {
		t.Errorf("unbound socket reachable: %q", out)
	}
}

func TestNewFailsWhereBwrapCannotWork(t *testing.T) {
	t.Parallel()
	// Inside a sandbox user namespaces are off and cgroups read-only, like
	// in an unprivileged container: New must refuse, name the cause and
	// both ways out, and never fall back.
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{Network: sandbox.Network{Mode: "off"}})
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{sb.Info().Home + "/a", "nolimits"}, []string{"local isolation bwrap does not work on this host", "AGENTA_RUNNER_LOCAL_ISOLATION=none", "--security-opt", "bwrap:"}},
		{[]string{sb.Info().Home + "/b"}, []string{"local sandbox limits", "AGENTA_RUNNER_LOCAL_MEMORY_MB=0"}},
	} {
		out, err := run(t, sb, nil, "new", tc.args...)
		if err == nil {
			t.Errorf("New %v inside a sandbox succeeded: %q", tc.args, out)
			continue
		}
		t.Logf("New %v: %s", tc.args, out)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("New %v error %q lacks %q", tc.args, out, w)
			}
		}
	}
	// Control: the same helper outside a sandbox works.
	if out, err := sandboxtest.Sh(t, createSpec(t, newBwrap(t, nil), sandbox.Spec{}), "echo ok"); err != nil || out != "ok\n" {
		t.Errorf("New on the host (control): %q, %v", out, err)
	}
}

func TestEscapeRootOnlyFiles(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/etc/shadow"); err != nil {
		t.Skip("no /etc/shadow on this host")
	}
	p := newBwrap(t, nil)
	sb := createSpec(t, p, sandbox.Spec{})
	if out, err := sandboxtest.Sh(t, sb, "cat /etc/shadow"); err == nil && out != "" {
		t.Errorf("read /etc/shadow: %q", out)
	}
	if out, err := sandboxtest.Sh(t, sb, "grep -c root /etc/passwd"); err != nil || out == "0\n" {
		t.Errorf("read /etc/passwd (control): %q, %v", out, err)
	}
}
