package render

import (
	"io"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// The cost of rendering streamed text, against writing the deltas raw
// (the baseline): what a person's terminal pays for Clean and the
// renderer's bookkeeping per delta.
var benchDelta = strings.Repeat("streamed words of an answer, ", 3) // ~90 bytes, a typical delta

func BenchmarkDeltaRaw(b *testing.B) {
	b.SetBytes(int64(len(benchDelta)))
	for b.Loop() {
		_, _ = io.WriteString(io.Discard, benchDelta)
	}
}

func BenchmarkDeltaRendered(b *testing.B) {
	r := New(io.Discard, Options{Color: true})
	ev := wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: benchDelta}
	b.SetBytes(int64(len(benchDelta)))
	for b.Loop() {
		r.Event(ev)
	}
}

func BenchmarkDeltaRenderedNonASCII(b *testing.B) {
	delta := strings.Repeat("gestreamte Wörter — 日本語 ", 3)
	r := New(io.Discard, Options{Color: true})
	ev := wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: delta}
	b.SetBytes(int64(len(delta)))
	for b.Loop() {
		r.Event(ev)
	}
}

func BenchmarkDeltaRenderedWithEscapes(b *testing.B) {
	delta := strings.Repeat("\x1b[31mred\x1b[0m text ", 6)
	r := New(io.Discard, Options{Color: true})
	ev := wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: delta}
	b.SetBytes(int64(len(delta)))
	for b.Loop() {
		r.Event(ev)
	}
}
