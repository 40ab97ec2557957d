package netstack

import (
	"errors"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
)

func TestAllowlist(t *testing.T) {
	a, err := ParseAllowlist([]string{
		"api.example.com", "*.github.com", "10.1.0.0/16", "203.0.113.7",
		"pinned.example.org:8443", "https://llm.example.net/v1", "http://port.example.net:8080/x", "[::1]:9000", "Trailing.Dot.",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"API.Example.com.", 80, true},
		{"evil.api.example.com", 443, false},
		{"example.com", 443, false},
		{"raw.github.com", 443, true},
		{"a.b.github.com", 22, true},
		{"github.com", 443, false}, // *.d is subdomains only
		{"notgithub.com", 443, false},
		{"10.1.200.3", 5432, true},
		{"10.2.0.1", 5432, false},
		{"203.0.113.7", 80, true},
		{"203.0.113.8", 80, false},
		{"pinned.example.org", 8443, true},
		{"pinned.example.org", 443, false},
		{"llm.example.net", 443, true}, // a URL without a port admits any
		{"port.example.net", 8080, true},
		{"port.example.net", 80, false},
		{"::1", 9000, true},
		{"[::1]", 9000, true},
		{"::1", 9001, false},
		{"trailing.dot", 1, true},
		{"api.example.com.evil.io", 443, false},
	} {
		if got := a.allows(tc.host, tc.port); got != tc.want {
			t.Errorf("allows(%q, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
}

func TestAllowlistRejects(t *testing.T) {
	for _, e := range []string{"", "*", "host:0", "host:99999", "a b", "https://", "*.*.x"} {
		if _, err := ParseAllowlist([]string{e}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseAllowlist(%q) = %v, want ErrInvalid", e, err)
		}
	}
	if a, err := ParseAllowlist(nil); err != nil || a.allows("example.com", 443) {
		t.Errorf("empty allowlist: %v, allows example.com", err)
	}
}
