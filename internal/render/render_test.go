package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden outputs in testdata")

// views are the renderings each golden holds: plain (not a terminal, or
// NO_COLOR), colour (ESC shown as ␛ in the file), and thoughts expanded.
var views = []struct {
	name string
	opt  Options
}{
	{"plain", Options{}},
	{"color", Options{Color: true}},
	{"thoughts", Options{Thoughts: true}},
}

func renderAll(t testing.TB, stream []byte, opt Options) string {
	var out bytes.Buffer
	r := New(&out, opt)
	sc := bufio.NewScanner(bytes.NewReader(stream))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("bad record %s: %v", sc.Text(), err)
		}
		r.Record(rec)
	}
	return out.String()
}

func TestGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txtar")
	if len(files) == 0 {
		t.Fatal("no goldens")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var stream []byte
			want := map[string]string{}
			for _, f := range ar.Files {
				if f.Name == "events.ndjson" {
					stream = f.Data
				} else {
					want[f.Name] = string(f.Data)
				}
			}
			var outFiles []txtar.File
			outFiles = append(outFiles, txtar.File{Name: "events.ndjson", Data: stream})
			for _, v := range views {
				got := strings.ReplaceAll(renderAll(t, stream, v.opt), "\x1b", "␛")
				outFiles = append(outFiles, txtar.File{Name: v.name, Data: []byte(got)})
				if *update {
					continue
				}
				if d := cmp.Diff(want[v.name], got); d != "" {
					t.Errorf("%s view (-want +got):\n%s\nrun go test ./internal/render -update to accept", v.name, d)
				}
			}
			if *update {
				ar.Files = outFiles
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The injection golden shows what is left; this checks nothing slipped by
// in the plain view, independent of what the golden says.
func TestInjectedSequencesNeverReachTheTerminal(t *testing.T) {
	ar, err := txtar.ParseFile("testdata/inject.txtar")
	if err != nil {
		t.Fatal(err)
	}
	out := renderAll(t, ar.Files[0].Data, Options{})
	if err := terminalSafe(out); err != "" {
		t.Fatalf("%s in %q", err, out)
	}
	for _, s := range []string{"pwned", "hidden", "1$r"} {
		if strings.Contains(out, s+"\n") && strings.Contains(out, "\x1b") {
			t.Fatalf("sequence payload %q survived with an ESC", s)
		}
	}
}

// terminalSafe reports the first thing in s that a terminal would act on.
func terminalSafe(s string) string {
	for i, c := range s {
		switch {
		case c == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return "invalid UTF-8"
		case c == '\n' || c == '\t':
		case c < 0x20 || c == 0x7f:
			return "control character"
		case hiddenRune(c):
			return "C1 or bidi control"
		}
	}
	return ""
}

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\n\tindented", "plain text\n\tindented"},
		{"\x1b[31mred\x1b[0m", "red"},
		{"\x1b[38;5;196mx", "x"},
		{"\x1b]0;title\x07after", "after"},
		{"\x1b]52;c;Y2xpcA==\x1b\\after", "after"},
		{"\x1bPq#0;2;0;0;0\x1b\\after", "after"},
		{"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"\x1bcreset", "reset"},
		{"\x1b(Bascii", "ascii"},
		{"a\rb\x08c\x00d\x7fe", "abcde"},
		{"\u009b31mx", "31mx"},
		{"ab\u202edc", "abdc"},
		{"bad \xff utf8", "bad  utf8"},
		{"unterminated \x1b]0;forever", "unterminated "},
		{"trailing \x1b", "trailing "},
		{"é ü 日本 🙂", "é ü 日本 🙂"},
	} {
		if got := Clean(tc.in); got != tc.want {
			t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestColorEnabled(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		terminal bool
		getenv   func(string) string
		want     bool
	}{
		{true, env(), true},
		{false, env(), false},
		{true, env("NO_COLOR", "1"), false},
		{true, env("TERM", "dumb"), false},
	} {
		if got := ColorEnabled(tc.terminal, tc.getenv); got != tc.want {
			t.Errorf("ColorEnabled(%v, ...) = %v, want %v", tc.terminal, got, tc.want)
		}
	}
}

func TestResultShowsDuration(t *testing.T) {
	var out bytes.Buffer
	New(&out, Options{}).Result(wire.Result{OK: true, StopReason: "end_turn"}, 1234*time.Millisecond)
	if got, want := out.String(), "─ end_turn · 1.2s\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// FuzzRenderer feeds arbitrary strings into every field the renderer
// shows; with colour off nothing a terminal acts on may come out, and with
// colour on only the renderer's own SGR codes.
func FuzzRenderer(f *testing.F) {
	f.Add("text", "\x1b[2J", "tool", `{"command":"ls"}`, `"out"`, `{"exit_code":1}`, true)
	f.Add("\x1b]0;x\x07", "\u009b", "\x1bP", `{"a":"\u001b[31m"}`, `{"x":"\u001b"}`, `{"exitCode":"\u001b"}`, false)
	f.Add("", "", "", "", "", "", false)
	f.Fuzz(func(t *testing.T, a, b, c, input, output, data string, color bool) {
		raw := func(s string) json.RawMessage {
			if json.Valid([]byte(s)) {
				return json.RawMessage(s)
			}
			q, _ := json.Marshal(s)
			return q
		}
		payload, _ := json.Marshal(map[string]any{"toolCallId": a, "toolCall": map[string]any{"name": b, "title": c, "kind": a, "input": raw(input)}})
		resp, _ := json.Marshal(map[string]any{"approved": color, "decidedBy": b})
		total, cost := int64(len(a)), 0.5
		evs := []wire.Event{
			{Type: wire.EventMessage, Role: "user", Text: a},
			{Type: wire.EventThoughtStart, ID: a},
			{Type: wire.EventThoughtDelta, ID: a, Delta: b},
			{Type: wire.EventMessageStart, ID: a},
			{Type: wire.EventMessageDelta, ID: a, Delta: b},
			{Type: wire.EventMessageEnd, ID: a},
			{Type: wire.EventMessage, Role: "assistant", ID: c, Text: c},
			{Type: wire.EventToolCall, ID: a, Name: b, Kind: c, Input: raw(input)},
			{Type: wire.EventToolCall, ID: a, Name: c, Kind: b, Input: raw(output)},
			{Type: wire.EventToolResult, ID: a, Output: raw(output), Data: raw(data), IsError: color, Denied: !color},
			{Type: wire.EventToolResult, ID: b, Output: raw(input)},
			{Type: wire.EventInteractionReq, ID: c, Payload: payload},
			{Type: wire.EventInteractionRes, ID: c, Payload: resp},
			{Type: wire.EventData, Name: "network.blocked", Data: raw(data)},
			{Type: wire.EventUsage, Input: raw(input), Output: raw(output), Total: &total, Cost: &cost},
			{Type: wire.EventError, Message: a + b},
			{Type: wire.EventDone, StopReason: c},
		}
		var out bytes.Buffer
		r := New(&out, Options{Color: color, Thoughts: color})
		for _, ev := range evs {
			r.Event(ev)
		}
		r.Result(wire.Result{OK: color, Error: c, StopReason: b, SessionID: a, Usage: &wire.Usage{Input: 1}}, time.Second)
		r.Notice("runner note")
		_ = ParseApproval(evs[11])
		got := out.String()
		for _, sgr := range []string{sgrReset, sgrBold, sgrDim, sgrRed, sgrGreen, sgrYellow, sgrCyan} {
			got = strings.ReplaceAll(got, sgr, "")
		}
		if !color && got != out.String() {
			t.Fatalf("colour codes with colour off: %q", out.String())
		}
		if err := terminalSafe(got); err != "" {
			t.Fatalf("%s in %q", err, got)
		}
		if Clean(Clean(a)) != Clean(a) {
			t.Fatalf("Clean not idempotent on %q", a)
		}
	})
}
