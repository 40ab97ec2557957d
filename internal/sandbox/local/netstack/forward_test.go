package netstack

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoopbackForwards(t *testing.T) {
	got := LoopbackForwards([]string{
		"127.0.0.1:8080", "http://localhost:11434/v1", "https://127.0.0.2:9443", "127.0.0.1:8080",
		"example.com:443", "10.0.0.1:80", "127.0.0.1", "[::1]:8080", "127.0.0.1:3128", "*.example.com",
	})
	want := []string{"127.0.0.1:8080", "127.0.0.1:11434", "127.0.0.2:9443"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}
