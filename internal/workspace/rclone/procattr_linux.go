package rclone

import "syscall"

// procAttr starts rclone in its own process group, with SIGTERM as its
// parent-death signal.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}
