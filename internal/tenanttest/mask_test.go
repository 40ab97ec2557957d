package tenanttest

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// visibleTempDir is a directory on a host path sandboxes see read-only
// (/tmp is private in a sandbox, /var/tmp is not), removed after the test.
func visibleTempDir(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", pattern)
	if err != nil {
		t.Skipf("no visible temporary directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestAttackStoreDirOutsideDataDir: the operator keeps the durable
// workspace store in a directory outside the data dir
// (AGENTA_RUNNER_STORE_URL=/abs/path). A tenant's sandbox lists and reads
// that directory through the host's read-only root, where every project's
// checkpointed files lie. Must hold: the store is masked like the data
// dir; another project's secret is not readable, and the store is empty
// from inside.
func TestAttackStoreDirOutsideDataDir(t *testing.T) {
	needBwrap(t)
	store := visibleTempDir(t, "tenanttest-store-")
	r := start(t, "AGENTA_RUNNER_STORE_URL="+store)
	victim := r.stream(t, fake("exec echo victim-secret-9d1e > secret.txt", map[string]any{"sessionId": "victim", "projectId": "pa"}))
	if !victim.Result.OK {
		t.Fatalf("victim turn: %+v\n%s", victim.Result, victim.Text())
	}
	var stored string
	_ = filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "secret.txt" {
			stored = p
		}
		return nil
	})
	if stored == "" {
		t.Fatalf("the victim's file never reached the store %s; the attack needs it there", store)
	}
	attack := r.stream(t, fake("exec ls -aR "+store+"; cat "+stored, map[string]any{"sessionId": "attacker", "projectId": "pb"}))
	out := attack.Text()
	listed := strings.Contains("\n"+out, "\nsessions\n") || strings.Contains("\n"+out, "\nsecret.txt\n")
	if strings.Contains(out, "victim-secret-9d1e") || listed {
		t.Fatalf("the store %s is readable from another project's sandbox:\n%s", store, out)
	}
}

// TestAttackHostUnixSocket: a host service listens on a unix socket under
// a path the sandbox sees read-only (a database in /var/lib/x, a socket a
// user left in /var/tmp). A read-only mount does not stop connect(2), so
// the agent talks to the service. Must hold: both sockets — one in a
// directory of its own, one directly in a shared directory — refuse the
// connection from inside, while the runner's own tool relay socket, bound
// into every sandbox, still accepts it.
func TestAttackHostUnixSocket(t *testing.T) {
	needBwrap(t)
	dir := visibleTempDir(t, "tenanttest-sock-")
	inDir := filepath.Join(dir, "service.sock")
	loose := dir + ".sock" // directly in /var/tmp
	t.Cleanup(func() { os.Remove(loose) })
	for _, p := range []string{inDir, loose} {
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() }) // connect succeeds on the backlog, unaccepted
	}
	r := start(t)
	relays, _ := filepath.Glob(filepath.Join(r.DataDir, "run", "tools-*.sock"))
	if len(relays) != 1 {
		t.Fatalf("want the runner's one tool relay socket, found %q", relays)
	}
	relay := relays[0]
	tr := r.stream(t, fake("connectunix "+inDir+"\nconnectunix "+loose+"\nconnectunix "+relay, map[string]any{"sessionId": "sock"}))
	lines := strings.Split(strings.TrimSpace(tr.Text()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want three answers, got:\n%s\n%+v", tr.Text(), tr.Result)
	}
	for i, p := range []string{inDir, loose} {
		if !strings.HasPrefix(lines[i], "connectunix error") {
			t.Errorf("the host socket %s accepted a connection from the sandbox: %s", p, lines[i])
		}
	}
	if lines[2] != "connectunix ok" {
		t.Errorf("the tool relay socket %s is unreachable from the sandbox: %s", relay, lines[2])
	}
}

// TestAttackSysShowsHost: /sys is the host's, read-only. The agent reads
// the host's cgroup tree (every sandbox's group and usage, the runner's
// own) and its network interfaces with their MAC addresses. Must hold: no
// host interface name or MAC address is readable anywhere under /sys, and
// /sys/fs/cgroup holds no other group than the sandbox's own.
func TestAttackSysShowsHost(t *testing.T) {
	needBwrap(t)
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	r := start(t)
	tr := r.stream(t, fake("exec ls /sys/class/net; find /sys/devices /sys/bus -path '*/net/*' -name address -exec cat {} + 2>/dev/null; find /sys/fs/cgroup -name 'agentrunner*' -o -name '*-probe-*' 2>/dev/null", map[string]any{"sessionId": "sys"}))
	out := tr.Text()
	if !strings.HasPrefix(out, "exec") {
		t.Fatalf("no exec answer: %q %+v", out, tr.Result)
	}
	for _, i := range ifs {
		if mac := i.HardwareAddr.String(); mac != "" && mac != "00:00:00:00:00:00" && strings.Contains(out, mac) {
			t.Errorf("host interface %s's MAC %s is readable in the sandbox", i.Name, mac)
		}
		if i.Name != "lo" && strings.Contains(out, i.Name+"\n") {
			t.Errorf("host interface %s is listed in the sandbox", i.Name)
		}
	}
	if strings.Contains(out, "agentrunner") {
		t.Errorf("the host's cgroup tree is visible in the sandbox:\n%s", out)
	}
}

// TestAttackCPUDefaultIsAShare: with no CPU setting, one sandbox could use
// every core of the host, and a tenant running busy threads slowed the
// others by as many times. Must hold: by default the sandbox's own cgroup
// (read from inside) has a CPU quota of at most half the host's CPUs (one
// CPU on a host of one or two) and an explicit share (cpu.weight or
// cpu.shares).
func TestAttackCPUDefaultIsAShare(t *testing.T) {
	needBwrap(t)
	r := start(t)
	const script = `if [ -f /sys/fs/cgroup/cpu.max ]; then read q p < /sys/fs/cgroup/cpu.max; w=$(cat /sys/fs/cgroup/cpu.weight); else q=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us); p=$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); w=$(cat /sys/fs/cgroup/cpu/cpu.shares); fi; echo "cpu $q $p $w"`
	tr := r.stream(t, fake("exec "+script, map[string]any{"sessionId": "cpu"}))
	var fields []string
	for _, line := range strings.Split(tr.Text(), "\n") {
		if rest, ok := strings.CutPrefix(line, "cpu "); ok {
			fields = strings.Fields(rest)
		}
	}
	if len(fields) != 3 {
		t.Fatalf("cannot read the sandbox's CPU limits from inside:\n%s", tr.Text())
	}
	quota, err1 := strconv.ParseFloat(fields[0], 64)
	period, err2 := strconv.ParseFloat(fields[1], 64)
	weight, err3 := strconv.Atoi(fields[2])
	if err1 != nil || err2 != nil || err3 != nil || period <= 0 {
		t.Fatalf("the sandbox's CPU quota is not a number (no limit?): %q", fields)
	}
	cpus, most := quota/period, max(1, float64(runtime.NumCPU())/2)
	if quota <= 0 || cpus > most {
		t.Errorf("default CPU quota is %.2f CPUs of the host's %d; want at most %.1f", cpus, runtime.NumCPU(), most)
	}
	if weight <= 0 {
		t.Errorf("no CPU share: weight %d", weight)
	}
}

// TestAttackLongHarnessFilePath: a harnessFiles path of 5,000 characters,
// or with one component of 300, passes admission and fails only when
// written (ENAMETOOLONG), as a 500 after the sandbox was made. Must hold:
// both are refused up front with 400 (POST /run answers with the failure's
// status), the message naming the field.
func TestAttackLongHarnessFilePath(t *testing.T) {
	needBwrap(t)
	r := start(t)
	for name, p := range map[string]string{
		"long path":      strings.Repeat("d/", 2500) + "f",
		"long component": "dir/" + strings.Repeat("c", 300) + ".txt",
	} {
		status, body := r.call(t, "POST", "/run", fake("say hi", map[string]any{"harnessFiles": []any{map[string]any{"path": p, "content": "x"}}}))
		if status != 400 || !strings.Contains(string(body), "harnessFiles[0].path") {
			t.Errorf("%s: status %d, body %.300s; want 400 naming harnessFiles[0].path", name, status, body)
		}
	}
}
