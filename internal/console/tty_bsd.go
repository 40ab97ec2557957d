//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package console

import (
	"os"

	"golang.org/x/sys/unix"
)

// cbreak is tty_linux.go's with the BSD requests.
func cbreak(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TIOCGETA)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Lflag &^= unix.ICANON
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TIOCSETA, &raw); err != nil {
		return nil, err
	}
	const fread = 1 // FREAD: flush what was typed, not what is being written
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCFLUSH, fread)
	return func() { _ = unix.IoctlSetTermios(fd, unix.TIOCSETA, old) }, nil
}
