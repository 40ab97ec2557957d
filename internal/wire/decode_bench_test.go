package wire_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// BenchmarkDecodeHistory decodes a request carrying a 600-message history,
// as a platform sends late in a session: Decode against the two-pass
// reference it replaced, in the same run.
func BenchmarkDecodeHistory(b *testing.B) {
	var msgs []map[string]any
	for i := range 300 {
		msgs = append(msgs, map[string]any{"role": "user", "content": "hello " + strconv.Itoa(i)},
			map[string]any{"role": "assistant", "content": "echo: hello " + strconv.Itoa(i) + "."})
	}
	body, _ := json.Marshal(map[string]any{"harness": "claude", "sessionId": "s", "projectId": "p", "messages": msgs})
	for _, c := range []struct {
		name   string
		decode func([]byte) (*wire.Request, error)
	}{{"reference", wire.ReferenceDecode}, {"one-pass", wire.Decode}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
