package runner

import (
	"fmt"
	"unicode/utf8"
	"unsafe"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/wire"
)

// Caps bound what one turn holds in memory and in the session log,
// whatever its harness sends (the harness's JSON-RPC lines are capped by
// the driver). Zero fields take the defaults.
type Caps struct {
	// Output caps the assistant text a turn keeps (the result's output
	// and messages, the session log's coalesced message, and so the next
	// turns' history): text past it is dropped and a marker says so; the
	// stream still carries every delta.
	Output int
	// Result caps the events a turn keeps for its result. A turn whose
	// result carries them (a JSON /run) fails past it; a streamed one
	// keeps no text deltas in the list and stops adding to it.
	Result int
	// TurnLog caps the harness's events one turn writes to the session
	// log: the turn fails past it.
	TurnLog int
}

// Default caps (AGENTA_RUNNER_MAX_*).
const (
	DefaultMaxOutputBytes  = 4 << 20
	DefaultMaxResultBytes  = 16 << 20
	DefaultMaxTurnLogBytes = 64 << 20
)

func (c Caps) withDefaults() Caps {
	if c.Output <= 0 {
		c.Output = DefaultMaxOutputBytes
	}
	if c.Result <= 0 {
		c.Result = DefaultMaxResultBytes
	}
	if c.TurnLog <= 0 {
		c.TurnLog = DefaultMaxTurnLogBytes
	}
	return c
}

// eventOverhead is what an event costs beside its fields' bytes: the
// struct kept in memory, or its JSON keys in the log. Counting it bounds
// a flood of tiny events too.
const eventOverhead = 128

// eventSize is about what ev costs held or logged.
func eventSize(ev *wire.Event) int {
	n := eventOverhead + len(ev.Type) + len(ev.ID) + len(ev.Delta) + len(ev.Text) + len(ev.Role) + len(ev.Name) +
		len(ev.Input) + len(ev.Output) + len(ev.Data) + len(ev.Kind) + len(ev.Payload) + len(ev.Message) +
		len(ev.StopReason) + len(ev.TraceID) + len(ev.Render) + len(ev.URL) + len(ev.MediaType) +
		len(ev.AttachmentID) + len(ev.Outcome) + len(ev.ReasonCode) + len(ev.WorkingPath)
	return n
}

func isTextDelta(ev *wire.Event) bool {
	return ev.Type == wire.EventMessageDelta || ev.Type == wire.EventThoughtDelta
}

// admit accounts a harness event against the caps that end the turn and
// returns the error of the first it breaks.
func (t *turn) admit(ev *wire.Event) error {
	if ev.Transient {
		return nil
	}
	caps := t.svc.cfg.Caps
	size := eventSize(ev)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.evlog != nil {
		if t.logged+size > caps.TurnLog {
			return fmt.Errorf("the turn's events passed %d bytes in the session log (AGENTA_RUNNER_MAX_TURN_LOG_BYTES); raise it if the harness is legitimate", caps.TurnLog)
		}
		t.logged += size
	}
	if !t.streamed && t.kept+size > caps.Result {
		return fmt.Errorf("the turn's events passed %d bytes, the most a JSON result holds (AGENTA_RUNNER_MAX_RESULT_BYTES); stream the turn (Accept: application/x-ndjson) or raise it", caps.Result)
	}
	return nil
}

// trip ends the turn for a broken cap; the harness's further events are
// dropped while it stops.
func (t *turn) trip(err error) {
	if t.capped.Swap(true) {
		return
	}
	t.log.Warn("turn ended by a cap", logkey.Error, err)
	t.cancel(errdefs.With(errdefs.ErrExhausted, err))
}

// keepLocked adds ev to the result's list: a streamed turn's list serves
// only the harness's Diagnose, so it holds no text deltas (the output has
// the text) and stops at the cap. Called under t.mu.
func (t *turn) keepLocked(ev wire.Event) {
	size := eventSize(&ev)
	if t.streamed && (isTextDelta(&ev) || t.kept+size > t.svc.cfg.Caps.Result) {
		return
	}
	t.kept += size
	t.events = append(t.events, ev)
}

// outputMarker ends output cut at the cap.
const outputMarker = "\n[runner: output truncated at %d bytes; raise AGENTA_RUNNER_MAX_OUTPUT_BYTES]"

// writeOutputLocked appends a message delta to the turn's text, up to
// the output cap. The buffer grows to at most the cap, not to twice it as
// a strings.Builder would. Called under t.mu.
func (t *turn) writeOutputLocked(d string) {
	if t.outputCut {
		return
	}
	limit := t.svc.cfg.Caps.Output
	if room := limit - len(t.output); len(d) > room {
		for room > 0 && !utf8.RuneStart(d[room]) {
			room--
		}
		d = d[:room] + fmt.Sprintf(outputMarker, limit)
		t.outputCut = true
		t.log.Warn("turn output truncated at its cap (AGENTA_RUNNER_MAX_OUTPUT_BYTES)")
	}
	if need := len(t.output) + len(d); need > cap(t.output) {
		grown := make([]byte, len(t.output), max(need, min(2*cap(t.output), limit+len(outputMarker)+20)))
		copy(grown, t.output)
		t.output = grown
	}
	t.output = append(t.output, d...)
}

// outputLocked is the turn's text. The bytes are only ever appended to,
// past the string's end, so the string may share them. Called under t.mu.
func (t *turn) outputLocked() string {
	if len(t.output) == 0 {
		return ""
	}
	return unsafe.String(&t.output[0], len(t.output))
}
