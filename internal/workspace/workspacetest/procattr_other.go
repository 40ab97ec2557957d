//go:build !linux

package workspacetest

import "syscall"

// procAttr starts the server in its own process group; without Linux's
// parent-death signal only Stop ends it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
