package console

import (
	"os"
	"unicode"
)

// Keys reads a terminal byte by byte and sends each key that is not
// white space: while a question is asked the terminal is in cbreak mode
// (one key, no Enter); otherwise a line typed ahead arrives whole and is
// drained. Its goroutine ends when the terminal does, or with the process.
func Keys(f *os.File) <-chan string {
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
