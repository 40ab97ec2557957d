package runner

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/agentrunner/runner/internal/permission"
	"github.com/agentrunner/runner/internal/wire"
)

// renders puts a tool spec's render hint on its tool_call and
// tool_result events, as the reference runner does, so the web app can
// draw the tool's component.
type renders struct {
	byTool map[string]json.RawMessage
	// mu guards byCall: events arrive on the harness's reader.
	mu     sync.Mutex
	byCall map[string]json.RawMessage
}

func newRenders(specs []wire.ToolSpec) *renders {
	var r *renders
	for _, sp := range specs {
		if len(sp.Render) == 0 || string(sp.Render) == "null" {
			continue
		}
		if r == nil {
			r = &renders{byTool: map[string]json.RawMessage{}, byCall: map[string]json.RawMessage{}}
		}
		r.byTool[sp.Name] = sp.Render
	}
	return r
}

// hint sets ev.Render for the request's tools; a nil receiver (no tool
// with a hint) does nothing.
func (r *renders) hint(ev *wire.Event) {
	if r == nil || len(ev.Render) > 0 {
		return
	}
	switch ev.Type {
	case wire.EventToolCall:
		name := ev.Name
		if _, tool, ok := permission.SplitMCPName(name); ok {
			name = tool
		} else if i := strings.LastIndexAny(name, "/."); i >= 0 && r.byTool[name] == nil {
			name = name[i+1:]
		}
		if h := r.byTool[name]; h != nil {
			ev.Render = h
			r.mu.Lock()
			r.byCall[ev.ID] = h
			r.mu.Unlock()
		}
	case wire.EventToolResult:
		r.mu.Lock()
		ev.Render = r.byCall[ev.ID]
		r.mu.Unlock()
	}
}
