//go:build !linux

package rclone

import "syscall"

// procAttr starts rclone in its own process group. Without Linux's
// parent-death signal, a runner killed with SIGKILL leaves its mount
// behind until it is unmounted by hand.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
