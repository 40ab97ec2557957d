package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// This host's layout: v1 controllers plus an empty v2 hierarchy.
const hybridMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridSelf = `9:name=systemd:/
8:pids:/
4:memory:/process_api/abc
1:cpu,cpuacct:/
0::/
`

func TestParseCgroupLayout(t *testing.T) {
	mounts := parseMounts(hybridMountinfo)
	want := map[string]mount{
		"cpu":          {"/sys/fs/cgroup/cpu,cpuacct", "/"},
		"cpuacct":      {"/sys/fs/cgroup/cpu,cpuacct", "/"},
		"memory":       {"/sys/fs/cgroup/memory", "/"},
		"pids":         {"/sys/fs/cgroup/pids", "/"},
		"name=systemd": {"/sys/fs/cgroup/systemd", "/"},
		"cgroup2":      {"/sys/fs/cgroup/unified", "/"},
	}
	if diff := cmp.Diff(want, mounts, cmp.AllowUnexported(mount{})); diff != "" {
		t.Errorf("parseMounts (-want +got):\n%s", diff)
	}
	self := parseSelf(hybridSelf)
	if self["memory"] != "/process_api/abc" || self["cpu"] != "/" || self["cpuacct"] != "/" || self[""] != "/" {
		t.Errorf("parseSelf = %v", self)
	}
	// A container that mounts its own sub-tree of the hierarchy.
	if got := relTo("/kubepods/pod1/c1", "/kubepods/pod1/c1"); got != "" {
		t.Errorf("relTo at the mount root = %q, want empty", got)
	}
}

// fakeGroup makes a directory with the given (empty) control files.
func fakeGroup(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCgroupApply(t *testing.T) {
	l := Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 1.5}.compile()
	t.Run("v2", func(t *testing.T) {
		dir := fakeGroup(t, "memory.max", "pids.max", "cpu.max", "cpu.weight") // no swap accounting
		cg := &Group{v2: true, dirs: map[string]string{"": dir}}
		if err := cg.apply(l); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, f := range []string{"memory.max", "pids.max", "cpu.max", "cpu.weight"} {
			got[f] = read(t, filepath.Join(dir, f))
		}
		want := map[string]string{"memory.max": "67108864", "pids.max": "32", "cpu.max": "150000 100000", "cpu.weight": "100"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("v2 files (-want +got):\n%s", diff)
		}
	})
	t.Run("v1", func(t *testing.T) {
		mem := fakeGroup(t, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
		pids := fakeGroup(t, "pids.max")
		cpu := fakeGroup(t, "cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares")
		cg := &Group{dirs: map[string]string{"memory": mem, "pids": pids, "cpu": cpu}}
		if err := cg.apply(l); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{
			"memory.limit_in_bytes":       read(t, mem+"/memory.limit_in_bytes"),
			"memory.memsw.limit_in_bytes": read(t, mem+"/memory.memsw.limit_in_bytes"),
			"pids.max":                    read(t, pids+"/pids.max"),
			"cpu.cfs_quota_us":            read(t, cpu+"/cpu.cfs_quota_us"),
			"cpu.cfs_period_us":           read(t, cpu+"/cpu.cfs_period_us"),
			"cpu.shares":                  read(t, cpu+"/cpu.shares"),
		}
		want := map[string]string{
			"memory.limit_in_bytes": "67108864", "memory.memsw.limit_in_bytes": "67108864",
			"pids.max": "32", "cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000", "cpu.shares": "1024",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("v1 files (-want +got):\n%s", diff)
		}
	})
}

func TestCgroupReason(t *testing.T) {
	dir := fakeGroup(t)
	write := func(f, s string) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
	write("pids.events", "max 0\n")
	cg := &Group{v2: true, dirs: map[string]string{"": dir}}
	before := cg.Counters()
	if got := cg.Counters().Reason(before); got != "" {
		t.Errorf("reason with no new events = %q", got)
	}
	write("pids.events", "max 4\n")
	if got := cg.Counters().Reason(before); got != "too many processes" {
		t.Errorf("reason = %q, want too many processes", got)
	}
	write("memory.events", "oom_kill 2\n")
	if got := cg.Counters().Reason(before); got != "out of memory" {
		t.Errorf("reason = %q, want out of memory", got)
	}
}

func TestSetupCgroupsV2WithoutControllers(t *testing.T) {
	// An empty v2 hierarchy (this host's /sys/fs/cgroup/unified) and no v1
	// controllers: New must fail and say why.
	root := fakeGroup(t, "cgroup.controllers")
	mi := "41 31 0:38 / " + root + " rw,relatime - cgroup2 cgroup2 rw\n"
	_, err := setupCgroups(Limits{MemoryBytes: 64 << 20}.compile(), mi, "0::/\n")
	if err == nil {
		t.Fatal("setupCgroups succeeded without any memory controller")
	}
	for _, want := range []string{"controller memory not available", "no cgroup v1 hierarchy with the memory controller"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
