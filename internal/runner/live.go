package runner

import (
	"context"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/gateway"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/tools/relay"
	"github.com/agentrunner/runner/internal/wire"
)

// live is a harness session with its sandbox: what the pool keeps warm.
type live struct {
	sb        sandbox.Sandbox
	sess      agent.Session
	harness   string
	provider  string
	configFP  string
	historyFP string // of the conversation the next turn must continue
	epoch     string
	stateKey  string
	awaiting  bool              // parked waiting for approval
	binding   *relay.Binding    // the tool relay's binding, nil without tools
	route     *gateway.Route    // the key gateway's route, nil when keys are not hidden
	env       map[string]string // the model environment the harness sees
	req       *wire.Request     // the request the harness is configured from
	channel   *channels         // streams from a remote sandbox to the runner
	forward   sandbox.Process   // the in-sandbox model forward, remote only
	diagnose  func(context.Context, DiagnoseInput) error
	durable   *durable  // the synced durable trees, nil without a store
	parkedAt  time.Time // when it was last parked warm
	// generation is the session lease's generation of the turn it last
	// served: a turn under another one finds the session ran elsewhere
	// since, and the harness missing those turns.
	generation int64
	undos      []undo // its set-up stages' teardown, in setup order (stages.go)

	// mu guards the following.
	mu    sync.Mutex
	cur   *turn  // the turn the session's callbacks serve now
	gates []gate // permission requests parked for a person
}

func (lv *live) addGate(g gate) {
	lv.mu.Lock()
	lv.gates = append(lv.gates, g)
	lv.mu.Unlock()
}

func (lv *live) takeGates() []gate {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	g := lv.gates
	lv.gates = nil
	return g
}

func (lv *live) turn() *turn {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.cur
}

func (lv *live) attach(t *turn) {
	lv.mu.Lock()
	lv.cur = t
	lv.mu.Unlock()
}
