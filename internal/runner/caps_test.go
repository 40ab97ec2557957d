package runner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
)

func withCaps(c runner.Caps) option { return func(cfg *runner.Config) { cfg.Caps = c } }

// TestOutputCapTruncatesWithMarker: text past the output cap is not kept
// (result output, messages, the log's message) and a marker names the
// setting; the turn itself stands, and the stream had every delta.
func TestOutputCapTruncatesWithMarker(t *testing.T) {
	e := newEnv(t, withCaps(runner.Caps{Output: 1000}))
	streamed := 0
	res, err := e.svc.Run(t.Context(), req{session: "s1", messages: []string{"flood 30 100"}}.wire(), func(_ int64, ev wire.Event) {
		if ev.Type == wire.EventMessageDelta {
			streamed += len(ev.Delta)
		}
	})
	if err != nil || !res.OK {
		t.Fatalf("run: %v %+v", err, res)
	}
	kept, marker, _ := strings.Cut(res.Output, "\n[runner: output truncated")
	if len(kept) > 1000 || marker == "" || !strings.Contains(res.Output, "AGENTA_RUNNER_MAX_OUTPUT_BYTES") {
		t.Fatalf("output %d bytes, %q…", len(res.Output), res.Output[max(0, len(res.Output)-120):])
	}
	if streamed != 3000 || len(res.Messages) != 1 || res.Messages[0].Content != res.Output {
		t.Fatalf("streamed %d bytes; messages %d", streamed, len(res.Messages))
	}
	evs, err := e.st.ReadEvents(t.Context(), sk("s1"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Event.Type == wire.EventMessage && ev.Event.Role == "assistant" && ev.Event.Text != res.Output {
			t.Fatalf("logged message %d bytes, want the truncated output", len(ev.Event.Text))
		}
	}
}

// TestResultCapFailsJSONTurn: a turn whose result carries its events
// fails once they pass the result cap, naming the setting, and holds no
// more than the cap; a streamed turn (Streamed) keeps no text deltas and
// is not failed by it.
func TestResultCapFailsJSONTurn(t *testing.T) {
	const limit = 64 << 10
	e := newEnv(t, withCaps(runner.Caps{Result: limit}))
	res, err := e.svc.Run(t.Context(), req{messages: []string{"flood 200 1000"}}.wire(), nil)
	if err == nil || !errors.Is(err, errdefs.ErrExhausted) || !strings.Contains(res.Error, "AGENTA_RUNNER_MAX_RESULT_BYTES") {
		t.Fatalf("err %v, result error %q", err, res.Error)
	}
	size := 0
	for _, ev := range res.Events {
		size += len(ev.Delta)
	}
	if size > limit {
		t.Fatalf("the result holds %d bytes of deltas, over the cap", size)
	}

	turn, err := e.svc.Start(t.Context(), req{messages: []string{"flood 200 1000"}}.wire())
	if err != nil {
		t.Fatal(err)
	}
	turn.Streamed()
	res, err = turn.Run(t.Context(), func(int64, wire.Event) {})
	if err != nil || !res.OK {
		t.Fatalf("streamed: %v %+v", err, res.Error)
	}
	for _, ev := range res.Events {
		if ev.Type == wire.EventMessageDelta {
			t.Fatalf("a streamed turn kept a text delta")
		}
	}
}

// TestTurnLogCapFailsTurn: the harness's events one turn writes to the
// session log stop at the cap, counting each event's overhead (a flood of
// one-byte deltas is bounded too), and the turn fails naming the setting;
// the log ends with the error and done.
func TestTurnLogCapFailsTurn(t *testing.T) {
	const limit = 64 << 10
	e := newEnv(t, withCaps(runner.Caps{TurnLog: limit}))
	turn, err := e.svc.Start(t.Context(), req{session: "s1", messages: []string{"flood 5000"}}.wire())
	if err != nil {
		t.Fatal(err)
	}
	turn.Streamed()
	res, err := turn.Run(t.Context(), func(int64, wire.Event) {})
	if err == nil || !errors.Is(err, errdefs.ErrExhausted) || !strings.Contains(res.Error, "AGENTA_RUNNER_MAX_TURN_LOG_BYTES") {
		t.Fatalf("err %v, result error %q", err, res.Error)
	}
	evs, err := e.st.ReadEvents(t.Context(), sk("s1"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for _, ev := range evs {
		if ev.Event.Type == wire.EventMessageDelta {
			deltas++
		}
	}
	if deltas == 0 || deltas*128 > limit || evs[len(evs)-1].Event.Type != wire.EventDone {
		t.Fatalf("log holds %d deltas of %d events, last %q", deltas, len(evs), evs[len(evs)-1].Event.Type)
	}
}
