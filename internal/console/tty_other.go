//go:build !linux

package console

import (
	"errors"
	"os"
)

// cbreak is Linux's (tty_linux.go); elsewhere a question is answered with
// a key and Enter.
func cbreak(*os.File) (restore func(), err error) {
	return nil, errors.New("single-key input is implemented on Linux only")
}
