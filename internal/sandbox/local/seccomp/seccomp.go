// Package seccomp builds the seccomp filter the local provider has
// bubblewrap load into every sandbox just before exec (bwrap --seccomp):
// the syscalls denied and why are listed at deniedSyscalls.
package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"

	sbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside a sandbox. A coding agent (shells,
// compilers, package managers, node, python, git) needs none of them, and
// each is either a way out of the sandbox or a large kernel attack surface:
//
//   - kernel modules: init_module, finit_module, delete_module
//   - kernel keyring: add_key, request_key, keyctl
//   - tracing and other processes' memory: ptrace, process_vm_readv,
//     process_vm_writev, kcmp
//   - mounts and root changes: mount, umount2, pivot_root, chroot,
//     move_mount, open_tree, fsopen, fsconfig, fsmount, fspick, mount_setattr
//   - namespaces: unshare, setns, and clone with CLONE_NEWUSER (clone3 gets
//     ENOSYS, because its flags are out of a filter's reach; libc falls back
//     to clone); bwrap --disable-userns also limits user namespaces to zero
//   - bpf, perf_event_open, userfaultfd, io_uring_setup/enter/register
//   - kexec_load, kexec_file_load, reboot, swapon, swapoff, acct, quotactl,
//     syslog, settimeofday, clock_settime, clock_adjtime, adjtimex
//   - open_by_handle_at, name_to_handle_at (file handles walk around mounts)
//   - iopl, ioperm, uselib, vhangup, lookup_dcookie, nfsservctl
//   - ioctl TIOCSTI and TIOCLINUX, which push input into a terminal the
//     sandbox shares with the runner
//   - personality, except querying it and the values Docker allows (turning
//     off address space randomization is refused)
//
// Syscalls of a foreign architecture (i386 through int 0x80, x32) get ENOSYS,
// so the list cannot be bypassed by switching ABI.
var deniedSyscalls = []string{
	"init_module", "finit_module", "delete_module",
	"add_key", "request_key", "keyctl",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	"mount", "umount2", "pivot_root", "chroot",
	"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"unshare", "setns",
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
	"syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"open_by_handle_at", "name_to_handle_at",
	"iopl", "ioperm", "uselib", "vhangup", "lookup_dcookie", "nfsservctl",
}

// optionalSyscalls are in deniedSyscalls but do not exist on every
// architecture; the ones missing from the table are left out.
var optionalSyscalls = map[string]bool{"iopl": true, "ioperm": true, "uselib": true, "nfsservctl": true, "lookup_dcookie": true}

const (
	seccompArchOffset = 4 // offsetof(struct seccomp_data, arch)
	retErrnoENOSYS    = uint32(sbpf.ActionErrno) | uint32(unix.ENOSYS)
)

// Program assembles the filter once; bwrap reads it from a
// descriptor (--seccomp) as an array of struct sock_filter.
func Program() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := info.SyscallNames[n]; ok || !optionalSyscalls[n] {
			names = append(names, n)
		}
	}
	policy := sbpf.Policy{
		DefaultAction: sbpf.ActionAllow,
		Syscalls: []sbpf.SyscallGroup{
			{Action: sbpf.ActionErrno | sbpf.Action(unix.EPERM), Names: names},
			{
				Action: sbpf.ActionErrno | sbpf.Action(unix.EPERM),
				NamesWithCondtions: []sbpf.NameWithConditions{
					{
						Name:       "clone",
						Conditions: sbpf.ArgumentConditions{{Argument: cloneFlagsArg(), Operation: sbpf.BitsSet, Value: unix.CLONE_NEWUSER}},
					},
					{Name: "ioctl", Conditions: sbpf.ArgumentConditions{{Argument: 1, Operation: sbpf.Equal, Value: unix.TIOCSTI}}},
					{Name: "ioctl", Conditions: sbpf.ArgumentConditions{{Argument: 1, Operation: sbpf.Equal, Value: unix.TIOCLINUX}}},
					{
						// Denied unless arg 0 is one of: PER_LINUX, PER_LINUX32,
						// UNAME26, PER_LINUX32|UNAME26, or the query 0xffffffff.
						Name: "personality",
						Conditions: sbpf.ArgumentConditions{
							{Argument: 0, Operation: sbpf.NotEqual, Value: 0x0},
							{Argument: 0, Operation: sbpf.NotEqual, Value: 0x8},
							{Argument: 0, Operation: sbpf.NotEqual, Value: 0x20000},
							{Argument: 0, Operation: sbpf.NotEqual, Value: 0x20008},
							{Argument: 0, Operation: sbpf.NotEqual, Value: 0xffffffff},
						},
					},
				},
			},
		},
	}
	if _, ok := info.SyscallNames["clone3"]; ok {
		policy.Syscalls = append(policy.Syscalls, sbpf.SyscallGroup{
			Action: sbpf.ActionErrno | sbpf.Action(unix.ENOSYS), Names: []string{"clone3"},
		})
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// The library lets a foreign architecture through to the default
	// action (allow); a deny list must refuse it instead.
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompArchOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retErrnoENOSYS},
	}
	raw, err := bpf.Assemble(append(guard, insts...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// cloneFlagsArg is the clone argument holding the flags: the first
// everywhere but s390x, where the stack comes first.
func cloneFlagsArg() uint32 {
	if runtime.GOARCH == "s390x" {
		return 1
	}
	return 0
}
