package seccomp

import "testing"

func TestSeccompProgram(t *testing.T) {
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) == 0 || len(prog)%8 != 0 {
		t.Errorf("program is %d bytes, want a non-empty multiple of 8", len(prog))
	}
}
