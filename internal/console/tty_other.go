//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package console

import (
	"errors"
	"os"
)

// cbreak is Linux's and the BSDs' (tty_linux.go, tty_bsd.go); elsewhere a
// question is answered with
// key and Enter.
func cbreak(*os.File) (restore func(), err error) {
	return nil, errors.New("single-key input is implemented on Linux only")
}
