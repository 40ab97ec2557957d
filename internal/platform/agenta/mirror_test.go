package agenta

import (
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// TestStableRecordID pins the reference's id: uuid5(uuid5(uuid5(DNS,
// "agenta"), "records"), "<session>:<call>:<type>:<turn>"), the value
// Python's uuid module computes.
func TestStableRecordID(t *testing.T) {
	if got, want := stableRecordID("s1", "call-1", "tool_call", "t1"), "f61da586-74d3-550a-b19e-5d01199c467a"; got != want {
		t.Errorf("stableRecordID = %s, want %s", got, want)
	}
}

func TestBaseFor(t *testing.T) {
	req := &wire.Request{Telemetry: []byte(`{"exporters":{"otlp":{"endpoint":"http://api:8000/api/otlp/v1/traces"}}}`)}
	for _, c := range []struct {
		configured string
		req        *wire.Request
		want       string
	}{
		{"http://internal:8000/", req, "http://internal:8000"},
		{"", req, "http://api:8000/api"},
		{"", &wire.Request{}, DefaultBase},
	} {
		if got := BaseFor(c.configured, c.req); got != c.want {
			t.Errorf("BaseFor(%q) = %q, want %q", c.configured, got, c.want)
		}
	}
}
