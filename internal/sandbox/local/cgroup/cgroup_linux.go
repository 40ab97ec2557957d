package cgroup

import (
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits is what each sandbox's group enforces; a zero field is no limit.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	// CPUs is a quota in CPUs (1.5: one and a half CPUs' time each
	// period). With it every sandbox also gets an equal share of contended
	// CPU (cgroup v2 cpu.weight; v1 cpu.shares scaled from it): the kernel
	// then divides the CPU between sandboxes, not between their threads,
	// so a tenant running many threads does not slow its neighbours down.
	CPUs float64
}

// limits is Limits in the kernel's units.
type limits struct {
	memoryBytes int64
	pids        int64
	cpuQuota    int64 // microseconds per cpuPeriod
	cpuWeight   int64
}

const (
	cpuPeriod = 100000
	cpuWeight = 100 // the kernel's default weight, written explicitly
)

func (l Limits) compile() limits {
	var c limits
	if l.MemoryBytes > 0 {
		c.memoryBytes = l.MemoryBytes
	}
	if l.Pids > 0 {
		c.pids = l.Pids
	}
	if l.CPUs > 0 {
		c.cpuQuota = int64(l.CPUs * cpuPeriod)
		c.cpuWeight = cpuWeight
	}
	return c
}

func (l limits) none() bool { return l == limits{} }

// Parent makes one group per sandbox under a parent "agentrunner" group
// beside the runner's own cgroup. On cgroup v2 a process is started straight
// into it (CLONE_INTO_CGROUP); on v1 (a hierarchy per controller) the
// caller moves the process in before it runs the sandbox's command.
type Parent struct {
	v2       bool
	parents  map[string]string // controller ("memory", "pids", "cpu"; "" on v2) -> parent dir
	lim      limits
	instance string // prefixes group names: runners with other data dirs share the parent
}

// New finds a usable hierarchy, removes the groups an earlier run of this
// runner (same instance: it prefixes group names, so runners with other
// data dirs share the parent) left behind with whatever still runs in them,
// and checks that it can make groups. It returns nil, and no error, when
// no limit is asked for.
func New(lim Limits, instance string) (*Parent, error) {
	l := lim.compile()
	if l.none() {
		return nil, nil
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	cs, err := setupCgroups(l, string(mountinfo), string(self))
	if err != nil {
		return nil, err
	}
	cs.instance = instance
	cs.removeStale()
	return cs, cs.check()
}

// removeStale removes this instance's groups from an earlier run: a runner
// that crashed right after starting a sandbox can leave its processes
// behind (bwrap's init arms its parent-death signal late).
func (cs *Parent) removeStale() {
	for _, parent := range cs.parents {
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), cs.instance+"-") {
				_ = removeGroup(filepath.Join(parent, e.Name()), cs.v2)
			}
		}
	}
}

func (l limits) controllers() []string {
	var cs []string
	if l.memoryBytes > 0 {
		cs = append(cs, "memory")
	}
	if l.pids > 0 {
		cs = append(cs, "pids")
	}
	if l.cpuQuota > 0 {
		cs = append(cs, "cpu")
	}
	return cs
}

func setupCgroups(l limits, mountinfo, self string) (*Parent, error) {
	mounts, own := parseMounts(mountinfo), parseSelf(self)
	need := l.controllers()
	var v2err error
	if m, ok := mounts["cgroup2"]; ok {
		dir := filepath.Join(m.point, relTo(own[""], m.root))
		cg, err := setupV2(l, dir, need)
		if err == nil {
			return cg, nil
		}
		v2err = err
	}
	cg := &Parent{parents: map[string]string{}, lim: l}
	for _, c := range need {
		m, ok := mounts[c]
		if !ok {
			return nil, errors.Join(v2err, fmt.Errorf("no cgroup v1 hierarchy with the %s controller", c))
		}
		dir := filepath.Join(m.point, relTo(own[c], m.root), "agentrunner")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, errors.Join(v2err, fmt.Errorf("cgroup v1 %s: %w", c, err))
		}
		cg.parents[c] = dir
	}
	return cg, nil
}

// setupV2 enables the controllers for the parent group. The "no internal
// processes" rule forbids that while the runner's own cgroup holds
// processes, so those move to a leaf first, as container init systems do.
func setupV2(l limits, own string, need []string) (*Parent, error) {
	avail, err := os.ReadFile(filepath.Join(own, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	have := strings.Fields(string(avail))
	var enable []string
	for _, c := range need {
		if !containsStr(have, c) {
			return nil, fmt.Errorf("cgroup v2: controller %s not available in %s", c, own)
		}
		enable = append(enable, "+"+c)
	}
	ctl := strings.Join(enable, " ")
	if err := writeFile(filepath.Join(own, "cgroup.subtree_control"), ctl); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		if err := evacuate(own); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		if err := writeFile(filepath.Join(own, "cgroup.subtree_control"), ctl); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
	}
	parent := filepath.Join(own, "agentrunner")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), ctl); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	return &Parent{v2: true, parents: map[string]string{"": parent}, lim: l}, nil
}

// evacuate moves every process of dir into dir/runner.
func evacuate(dir string) error {
	leaf := filepath.Join(dir, "runner")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return err
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(string(procs)) {
		if err := writeFile(filepath.Join(leaf, "cgroup.procs"), pid); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// check makes and removes a group with the limits applied.
func (cs *Parent) check() error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	cg, err := cs.Create(fmt.Sprintf("probe-%x", b))
	if err != nil {
		return err
	}
	return cg.Destroy()
}

// Version is "v2" or "v1", for the provider's health report.
func (cs *Parent) Version() string {
	if cs.v2 {
		return "v2"
	}
	return "v1"
}

// Group is one sandbox's group: a directory per v1 controller, or one v2
// directory.
type Group struct {
	v2   bool
	dirs map[string]string // controller -> dir; "" on v2
	dfd  *os.File          // v2 directory, for CLONE_INTO_CGROUP
}

// Create makes the group of sandbox id with the limits written. The caller
// destroys it.
func (cs *Parent) Create(id string) (*Group, error) {
	cg := &Group{v2: cs.v2, dirs: map[string]string{}}
	for c, parent := range cs.parents {
		dir := filepath.Join(parent, cs.instance+"-"+id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			_ = cg.Destroy()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		cg.dirs[c] = dir
	}
	if err := cg.apply(cs.lim); err != nil {
		_ = cg.Destroy()
		return nil, err
	}
	if cs.v2 {
		f, err := os.Open(cg.dirs[""])
		if err != nil {
			_ = cg.Destroy()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		cg.dfd = f
	}
	return cg, nil
}

func (cg *Group) apply(l limits) error {
	type setting struct{ ctl, file, value string }
	var set []setting
	if cg.v2 {
		if l.memoryBytes > 0 {
			set = append(set, setting{"", "memory.max", itoa(l.memoryBytes)}, setting{"", "memory.swap.max?", "0"})
		}
		if l.pids > 0 {
			set = append(set, setting{"", "pids.max", itoa(l.pids)})
		}
		if l.cpuQuota > 0 {
			set = append(set, setting{"", "cpu.max", itoa(l.cpuQuota) + " " + itoa(cpuPeriod)}, setting{"", "cpu.weight", itoa(l.cpuWeight)})
		}
	} else {
		if l.memoryBytes > 0 {
			// memsw (memory+swap) must be at least the memory limit, so it
			// comes second; it exists only with swap accounting.
			set = append(set, setting{"memory", "memory.limit_in_bytes", itoa(l.memoryBytes)},
				setting{"memory", "memory.memsw.limit_in_bytes?", itoa(l.memoryBytes)})
		}
		if l.pids > 0 {
			set = append(set, setting{"pids", "pids.max", itoa(l.pids)})
		}
		if l.cpuQuota > 0 {
			set = append(set, setting{"cpu", "cpu.cfs_period_us", itoa(cpuPeriod)}, setting{"cpu", "cpu.cfs_quota_us", itoa(l.cpuQuota)},
				setting{"cpu", "cpu.shares", itoa(l.cpuWeight * 1024 / 100)})
		}
	}
	for _, s := range set {
		file, optional := strings.CutSuffix(s.file, "?")
		err := writeFile(filepath.Join(cg.dirs[s.ctl], file), s.value)
		if err != nil && !(optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("cgroup %s: %w", file, err)
		}
	}
	return nil
}

// FD is the group's directory to start processes in (v2:
// SysProcAttr.CgroupFD); false on v1.
func (cg *Group) FD() (int, bool) {
	if cg.dfd == nil {
		return 0, false
	}
	return int(cg.dfd.Fd()), true
}

// NeedsPid reports whether processes must be moved in after they start
// (v1), with Add.
func (cg *Group) NeedsPid() bool { return !cg.v2 }

// Add moves the process pid into the group.
func (cg *Group) Add(pid int) error {
	for _, dir := range cg.dirs {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// Dirs maps each v1 controller to the group's directory of it; on v2 the
// one directory is under "". It is a copy.
func (cg *Group) Dirs() map[string]string { return maps.Clone(cg.dirs) }

// Counters are the limit events a group has seen so far.
type Counters struct{ oomKills, pidsMax int64 }

// Counters reads the group's limit events.
func (cg *Group) Counters() Counters {
	var c Counters
	if cg.v2 {
		c.oomKills = keyed(filepath.Join(cg.dirs[""], "memory.events"), "oom_kill")
		c.pidsMax = keyed(filepath.Join(cg.dirs[""], "pids.events"), "max")
		return c
	}
	if d, ok := cg.dirs["memory"]; ok {
		c.oomKills = keyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
	}
	if d, ok := cg.dirs["pids"]; ok {
		c.pidsMax = keyed(filepath.Join(d, "pids.events"), "max")
	}
	return c
}

// Reason names the limit hit since before, if any: "out of memory", "too
// many processes", or "".
func (c Counters) Reason(before Counters) string {
	switch {
	case c.oomKills > before.oomKills:
		return "out of memory"
	case c.pidsMax > before.pidsMax:
		return "too many processes"
	}
	return ""
}

// Destroy kills what is left in the group and removes it. Idempotent.
func (cg *Group) Destroy() error {
	if cg.dfd != nil {
		cg.dfd.Close()
		cg.dfd = nil
	}
	var errs []error
	for c, dir := range cg.dirs {
		if err := removeGroup(dir, cg.v2); err != nil {
			errs = append(errs, err)
		} else {
			delete(cg.dirs, c)
		}
	}
	return errors.Join(errs...)
}

// removeGroup retries for a moment: the kernel frees a group only after its
// last process is reaped.
func removeGroup(dir string, v2 bool) error {
	var err error
	for i := range 50 {
		if i > 0 {
			time.Sleep(time.Duration(i) * time.Millisecond)
		}
		if v2 {
			_ = writeFile(filepath.Join(dir, "cgroup.kill"), "1")
		} else if procs, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, f := range strings.Fields(string(procs)) {
				if pid, _ := strconv.Atoi(f); pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return fmt.Errorf("remove cgroup: %w", err)
}

// keyed reads "key value" lines and returns the value of key, 0 if absent.
func keyed(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
