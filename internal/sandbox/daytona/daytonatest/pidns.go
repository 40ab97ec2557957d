package daytonatest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A boot is one run of a sandbox, from start (or create) to stop, as
// Daytona runs it: a fresh pid namespace, so pid numbers start again from
// 1 after every restart and nothing survives a stop. Its pid 1 is a shell
// that reaps orphans; toolbox stand-ins (idle processes) hold pid 2 and,
// after a restart, every pid number that was in use when the sandbox
// stopped, so a pid recorded before the stop names a stranger now, as
// Daytona's own toolbox would be. Toolbox commands run in the boot's pid
// and mount namespaces (a /proc of its own) through nsenter(1).
type boot struct {
	cmd     *exec.Cmd // unshare; its child is the namespace's pid 1
	init    int       // host pid of the namespace's pid 1
	ns      string    // the pid namespace, as readlink /proc/<pid>/ns/pid says
	toolbox []int     // namespace pids of the toolbox stand-ins
	done    chan struct{}
}

// userNS is set when the fake runs unprivileged: the namespaces then need
// a user namespace of their own.
var userNS = os.Geteuid() != 0

var probe struct {
	once sync.Once
	err  error
}

// probeNamespaces checks once that unshare and nsenter can make and enter
// a pid namespace here.
func probeNamespaces() error {
	probe.once.Do(func() {
		b, err := startBoot(os.TempDir(), nil)
		if err != nil {
			probe.err = err
			return
		}
		defer b.halt()
		out, err := b.command(context.Background(), os.TempDir(), nil, "sh", "-c", "echo $$").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "1" {
			probe.err = fmt.Errorf("nsenter into a pid namespace: %v: %s", err, out)
		}
	})
	return probe.err
}

// startBoot starts a pid namespace with toolbox stand-ins at pid 2 and at
// each of taken (namespace pids of the boot before).
func startBoot(dir string, taken []int) (*boot, error) {
	pids := []int{2}
	for _, p := range taken {
		if p > 2 {
			pids = append(pids, p)
		}
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	// ns_last_pid makes the next fork get the pid after it; only pid 1
	// forks while the stand-ins are placed.
	var script strings.Builder
	for _, p := range pids {
		fmt.Fprintf(&script, "echo %d > /proc/sys/kernel/ns_last_pid\nsleep 2147483647 &\n", p-1)
	}
	script.WriteString("echo ready\nwhile :; do wait; done\n")
	args := []string{"--pid", "--fork", "--mount-proc"}
	if userNS {
		args = append([]string{"--user", "--map-root-user"}, args...)
	}
	cmd := exec.Command("unshare", append(args, "sh", "-c", script.String())...)
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("unshare: %w", err)
	}
	b := &boot{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(b.done) }()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		<-b.done
		return nil, fmt.Errorf("unshare: the namespace did not start: %s", stderr.String())
	}
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err == nil {
		b.init, err = strconv.Atoi(strings.TrimSpace(string(kids)))
	}
	if err == nil {
		b.ns, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", b.init))
	}
	if err != nil {
		_ = cmd.Process.Kill()
		<-b.done
		return nil, fmt.Errorf("find the namespace's pid 1: %w", err)
	}
	// The stand-ins are there by now: the shell forked them before "ready".
	for _, p := range b.processes() {
		if slices.Contains(pids, p.PID) {
			b.toolbox = append(b.toolbox, p.PID)
		}
	}
	if len(b.toolbox) != len(pids) {
		b.halt()
		return nil, fmt.Errorf("placed toolbox stand-ins at %v, want %v (is /proc/sys/kernel/ns_last_pid writable?)", b.toolbox, pids)
	}
	return b, nil
}

// command is a process in the boot's namespaces, in dir, with env.
func (b *boot) command(ctx context.Context, dir string, env []string, name string, arg ...string) *exec.Cmd {
	args := []string{"-t", strconv.Itoa(b.init), "-p", "-m", "--wd=" + dir}
	if userNS {
		args = append(args, "-U", "--preserve-credentials")
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(args, "--", name), arg...)...)
	cmd.Env, cmd.Dir = env, dir
	return cmd
}

// Process is a process running in a sandbox.
type Process struct {
	HostPID int    // as the host sees it
	PID     int    // as the sandbox sees it
	Args    string // the command line, NULs as spaces
}

// processes lists the processes of the boot's namespace.
func (b *boot) processes() []Process {
	ents, _ := os.ReadDir("/proc")
	var out []Process
	for _, e := range ents {
		hp, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		if ns, err := os.Readlink(filepath.Join(dir, "ns", "pid")); err != nil || ns != b.ns {
			continue
		}
		st, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil || zombie(string(st)) {
			continue
		}
		p := Process{HostPID: hp, PID: nsPID(string(st))}
		if c, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
			p.Args = strings.TrimSpace(strings.ReplaceAll(string(c), "\x00", " "))
		}
		if p.PID > 0 {
			out = append(out, p)
		}
	}
	return out
}

func zombie(status string) bool {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "State:"); ok {
			return strings.HasPrefix(strings.TrimSpace(v), "Z") || strings.HasPrefix(strings.TrimSpace(v), "X")
		}
	}
	return false
}

// nsPID is the innermost pid of a /proc/<pid>/status.
func nsPID(status string) int {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[len(f)-1])
				return n
			}
		}
	}
	return 0
}

// halt ends every process of the boot (killing a pid namespace's pid 1
// kills all of it) and returns the namespace pids that were in use.
func (b *boot) halt() []int {
	var pids []int
	for _, p := range b.processes() {
		pids = append(pids, p.PID)
	}
	if err := syscall.Kill(b.init, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = b.cmd.Process.Kill()
	}
	<-b.done
	return pids
}

// bootOf returns b's running boot, starting one (a restart: fresh pids)
// when there is none. Called with mu held.
func (s *Server) bootOf(b *box) (*boot, error) {
	if b.boot != nil {
		return b.boot, nil
	}
	bt, err := startBoot(b.root, b.taken)
	if err != nil {
		return nil, err
	}
	b.boot = bt
	return bt, nil
}

// halt ends b's boot, if any: every process of the sandbox ends, and the
// daemon's port mapping with it.
func (s *Server) halt(b *box) {
	s.mu.Lock()
	bt := b.boot
	b.boot = nil
	s.mu.Unlock()
	if bt == nil {
		return
	}
	taken := bt.halt()
	// What listened in the sandbox is gone; its address is no mapping.
	if fs, err := os.OpenRoot(b.root); err == nil {
		_ = fs.Remove(filepath.Join("home", ".runner-sandboxd", "sandboxd.addr"))
		fs.Close()
	}
	s.mu.Lock()
	b.taken = taken
	s.mu.Unlock()
}

// Processes lists the processes running in sandbox id now.
func (s *Server) Processes(id string) []Process {
	bt := s.currentBoot(id)
	if bt == nil {
		return nil
	}
	return bt.processes()
}

// Toolbox returns the pids (as the sandbox sees them) of the current
// boot's toolbox stand-ins, and those of them still running: a stand-in
// that died was killed by something in the sandbox.
func (s *Server) Toolbox(id string) (placed, running []int) {
	bt := s.currentBoot(id)
	if bt == nil {
		return nil, nil
	}
	live := map[int]bool{}
	for _, p := range bt.processes() {
		live[p.PID] = true
	}
	for _, p := range bt.toolbox {
		if live[p] {
			running = append(running, p)
		}
	}
	return bt.toolbox, running
}

// currentBoot is the running boot of sandbox id, or nil.
func (s *Server) currentBoot(id string) *boot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.sandboxes[id]; b != nil {
		return b.boot
	}
	return nil
}
