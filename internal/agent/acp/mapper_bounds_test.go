package acp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// TestToolStatesBounded: a harness announcing 20,000 tool calls with
// 1 KB arguments each (half never finished) leaves the turn's mapper
// holding at most maxTools states and maxRetained bytes, where it held
// every call's arguments; a call still in flight keeps what a
// permission request needs, and new arguments are still told apart.
func TestToolStatesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("drives thousands of tool states: skipped under -short")
	}
	m := newMapper()
	arg := strings.Repeat("a", 1000)
	for i := range 20_000 {
		raw, _ := json.Marshal(map[string]any{"sessionUpdate": "tool_call", "toolCallId": fmt.Sprint("c", i), "title": "Read", "rawInput": map[string]string{"p": arg}})
		m.update(raw)
		if i%2 == 0 {
			m.update(json.RawMessage(fmt.Sprintf(`{"sessionUpdate":"tool_call_update","toolCallId":"c%d","status":"completed"}`, i)))
		}
	}
	if len(m.tools) > maxTools || m.retainedBytes() > maxRetained {
		t.Fatalf("%d tool states holding %d bytes", len(m.tools), m.retainedBytes())
	}
	m.update(json.RawMessage(`{"sessionUpdate":"tool_call","toolCallId":"live","title":"Bash","rawInput":{"cmd":"ls"}}`))
	if m.toolName("live") != "Bash" || string(m.toolInput("live")) != `{"cmd":"ls"}` {
		t.Fatalf("live call: %q %s", m.toolName("live"), m.toolInput("live"))
	}
	evs := m.update(json.RawMessage(`{"sessionUpdate":"tool_call_update","toolCallId":"live","rawInput":{"cmd":"ls -l"}}`))
	if len(evs) != 1 || evs[0].Type != wire.EventToolCall || string(evs[0].Input) != `{"cmd":"ls -l"}` || evs[0].Name != "Bash" {
		t.Fatalf("new arguments: %+v", evs)
	}
	if evs := m.update(json.RawMessage(`{"sessionUpdate":"tool_call_update","toolCallId":"live","rawInput":{"cmd":"ls -l"}}`)); len(evs) != 0 {
		t.Fatalf("same arguments again: %+v", evs)
	}
}

// retainedBytes counts what the states hold, not trusting the counter.
func (m *mapper) retainedBytes() int {
	n := 0
	for _, st := range m.tools {
		n += len(st.name) + len(st.input)
	}
	return n
}
