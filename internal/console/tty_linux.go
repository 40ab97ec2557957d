package console

import (
	"os"

	"golang.org/x/sys/unix"
)

// cbreak puts the terminal f into single-key input, its pending input
// discarded (it was typed before the question), and returns what restores
// it. Echo and signals stay on: the key shows, and Ctrl-C interrupts.
func cbreak(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Lflag &^= unix.ICANON
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	_ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH)
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
