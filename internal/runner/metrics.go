package runner

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// turnObs is what a turn keeps for its metrics: set before the harness
// starts, read on its event reader.
type turnObs struct {
	start     time.Time
	warm      bool
	prewarmed bool        // a pre-warmed slot (prewarm.go)
	first     atomic.Bool // the first harness event was observed
}

func (o *turnObs) startKind() metrics.Start {
	if o.warm {
		return metrics.StartWarm
	}
	if o.prewarmed {
		return metrics.StartPrewarmed
	}
	return metrics.StartCold
}

// meterEvent reports the turn's first harness event and its tool calls.
func (t *turn) meterEvent(ev wire.Event) {
	if !t.obs.first.Load() && t.obs.first.CompareAndSwap(false, true) {
		t.svc.cfg.Metrics.FirstEvent(t.plan.harness.spec.Name, t.plan.provider, t.obs.startKind(), time.Since(t.obs.start))
	}
	if ev.Type == wire.EventToolCall {
		t.svc.cfg.Metrics.ToolCall(t.plan.harness.spec.Name, t.plan.provider)
	}
}

// meterTurn reports the finished turn.
func (s *Service) meterTurn(t *turn, out agent.Outcome, err error) {
	outcome := metrics.OutcomeCompleted
	switch {
	case out.StopReason == agent.StopCancelled || stoppedFromOutside(err):
		outcome = metrics.OutcomeCancelled
	case err != nil:
		outcome = metrics.OutcomeFailed
	case out.StopReason == agent.StopPaused:
		outcome = metrics.OutcomePaused
	}
	s.cfg.Metrics.TurnEnded(metrics.Turn{
		Harness: t.plan.harness.spec.Name, Provider: t.plan.provider, Outcome: outcome,
		Start: t.obs.startKind(), Duration: time.Since(t.obs.start),
	})
}

// Pools describes each provider's warm pool (metrics.State).
func (s *Service) Pools() []metrics.Pool {
	out := make([]metrics.Pool, 0, len(s.pools))
	for _, name := range s.providerNames() {
		p, ok := s.pools[name]
		if !ok {
			continue
		}
		st := p.Stats()
		out = append(out, metrics.Pool{Provider: name, Warm: st.Warm, Awaiting: st.Awaiting, Capacity: st.Capacity})
	}
	return out
}

// Sandboxes counts the store's live sandboxes by provider and state
// (metrics.State). It reads the store, bounded to keep a scrape short.
func (s *Service) Sandboxes() ([]metrics.SandboxCount, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []metrics.SandboxCount
	for _, name := range s.providerNames() {
		for _, state := range []store.SandboxState{store.SandboxRunning, store.SandboxPaused} {
			recs, err := s.store.ListSandboxes(ctx, store.SandboxQuery{Provider: name, State: state})
			if err != nil {
				return out, err
			}
			out = append(out, metrics.SandboxCount{Provider: name, State: string(state), N: len(recs)})
		}
	}
	return out, nil
}

var _ metrics.State = (*Service)(nil)
