package runner

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// finish ends the turn's event log with done, committed together with the
// outcome end, and only then publishes done to followers and the caller:
// whoever sees done can read the outcome.
func (t *turn) finish(done wire.Event, end *store.Turn) error {
	t.mu.Lock()
	t.seq++
	seq := t.seq
	at := len(t.events)
	t.events = append(t.events, done)
	if t.observers != nil {
		t.observeEvent(done)
	}
	t.mu.Unlock()
	endErr, err := t.evlog.Finish(store.Event{Seq: seq, TurnIndex: t.index, Time: time.Now(), Event: done}, end)
	if berr := t.evlog.AwaitBegin(); berr != nil {
		// Not in the ledger (nothing of it was written): not done.
		t.beginErr = fmt.Errorf("record the turn in the ledger: %w", berr)
		err = errors.Join(err, t.beginErr)
	} else if endErr != nil {
		t.log.Error("record turn outcome", logkey.Error, endErr)
	}
	t.mu.Lock()
	if err != nil {
		// Not all on disk: not done, whatever the harness said.
		done.StopReason = "error"
		t.events[at] = done
	}
	t.hub.Committed(seq) // committed, or failed for good: the log is all there will be
	t.hub.Publish(wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &done})
	t.mu.Unlock()
	if t.sink != nil {
		t.sink(seq, done)
	}
	return err
}
