package main

import (
	"os"
	"unicode"

	"golang.org/x/sys/unix"
)

// keys reads a terminal byte by byte and sends each key that is not
// white space: while a question is asked the terminal is in cbreak mode
// (one key, no Enter); otherwise a line typed ahead arrives whole and is
// drained. Its goroutine ends when the terminal does, or with the process.
func keys(f *os.File) <-chan string {
	out := make(chan string)
	go func() {
		defer close(out)
		b := make([]byte, 1)
		for {
			n, err := f.Read(b)
			if err != nil {
				return
			}
			if n == 1 && !unicode.IsSpace(rune(b[0])) {
				out <- string(b[:1])
			}
		}
	}()
	return out
}

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
