package tailbuf

import (
	"fmt"
	"strings"
	"testing"
)

func TestBufferKeepsTheTail(t *testing.T) {
	b := New(8)
	if got := b.String(); got != "" {
		t.Errorf("empty buffer = %q", got)
	}
	for i := range 10 {
		fmt.Fprintf(b, "%d", i)
	}
	if got := b.String(); got != "23456789" {
		t.Errorf("after 0..9 = %q, want the last 8 bytes 23456789", got)
	}
	n, err := b.Write([]byte(strings.Repeat("x", 100) + "  "))
	if n != 102 || err != nil {
		t.Errorf("Write = %d, %v; want 102, nil", n, err)
	}
	if got := b.String(); got != "xxxxxx" {
		t.Errorf("after a long write = %q, want the last 8 bytes trimmed", got)
	}
}
