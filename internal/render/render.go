// Package render shows a turn's event stream to a person at a terminal:
// the assistant's text as it streams, thoughts dimmed or collapsed, one
// line per tool call with its result summarised, approval requests, and
// usage and duration at the end. Every string that came from a harness or
// a model is passed through Clean first, so a stream cannot drive the
// terminal; colour is the renderer's own and only when asked for.
package render

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentrunner/runner/internal/wire"
)

// Options choose how a stream is shown.
type Options struct {
	// Color enables ANSI colour and dimming. Use ColorEnabled to decide.
	Color bool
	// Thoughts shows thoughts in full, dimmed; otherwise each is one
	// collapsed line.
	Thoughts bool
}

// ColorEnabled is the colour rule: only on a terminal, never with NO_COLOR
// set (https://no-color.org) or TERM=dumb.
func ColorEnabled(terminal bool, getenv func(string) string) bool {
	return terminal && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

// SGR codes; the only escape sequences the renderer writes.
const (
	sgrReset  = "\x1b[0m"
	sgrBold   = "\x1b[1m"
	sgrDim    = "\x1b[2m"
	sgrRed    = "\x1b[31m"
	sgrGreen  = "\x1b[32m"
	sgrYellow = "\x1b[33m"
	sgrCyan   = "\x1b[36m"
)

const (
	resultLines = 3   // lines of a tool's output shown under it
	lineRunes   = 160 // longest line shown for a tool's title, args or output
)

// Renderer writes one stream's events as they arrive. It is not safe for
// concurrent use; write errors are ignored (the terminal went away).
type Renderer struct {
	w   io.Writer
	opt Options

	midLine    bool // the last byte written was not a newline
	thinking   bool // inside a thought block
	thoughtLen int  // words of the open thought, when collapsed
	inWord     bool // the open thought's last rune was not a space
	tools      map[string]*tool
	held       *tool           // a tool call announced without arguments yet
	streamed   map[string]bool // message ids shown through deltas
	// turnStreamed: a delta of the current turn was shown, so the turn's
	// coalesced answer (a session log's assistant message, with no id)
	// is not shown again.
	turnStreamed bool
	usage        *wire.Usage
	stopReason   string
	errShown     string // the last error event's message, not repeated by Result
	interaction  map[string]Approval
}

type tool struct {
	id, kind, title, args string
	shown                 bool
}

// New returns a renderer writing to w.
func New(w io.Writer, opt Options) *Renderer {
	return &Renderer{w: w, opt: opt, tools: map[string]*tool{}, streamed: map[string]bool{}, interaction: map[string]Approval{}}
}

func (r *Renderer) paint(sgr, s string) string {
	if !r.opt.Color || s == "" {
		return s
	}
	return sgr + s + sgrReset
}

func (r *Renderer) write(s string) {
	if s == "" {
		return
	}
	_, _ = io.WriteString(r.w, s)
	r.midLine = !strings.HasSuffix(s, "\n")
}

// line writes s on a line of its own.
func (r *Renderer) line(s string) {
	r.newline()
	r.write(s + "\n")
}

func (r *Renderer) newline() {
	if r.midLine {
		r.write("\n")
	}
}

// Record renders one NDJSON record of a stream: an event, the result, or
// an error record of a follow stream. Pings are ignored.
func (r *Renderer) Record(rec wire.Record) {
	switch {
	case rec.Kind == wire.RecordResult && rec.Result != nil:
		r.Result(*rec.Result, 0)
	case rec.Event != nil:
		r.Event(*rec.Event)
	}
}

// Event renders one event.
func (r *Renderer) Event(ev wire.Event) {
	if r.held != nil && !(ev.Type == wire.EventToolCall && ev.ID == r.held.id) {
		r.showTool(r.held)
	}
	switch ev.Type {
	case wire.EventMessageStart:
		r.endThought()
		r.newline()
	case wire.EventMessageDelta:
		r.endThought()
		r.streamed[ev.ID] = true
		r.turnStreamed = true
		r.write(Clean(ev.Delta))
	case wire.EventMessageEnd:
		r.newline()
	case wire.EventMessage:
		r.message(ev)
	case wire.EventThoughtStart:
		r.endThought()
		r.thinking, r.thoughtLen, r.inWord = true, 0, false
		r.newline()
		if r.opt.Thoughts {
			r.write(r.paint(sgrDim, "✻ ")) // marked without colour too
		}
	case wire.EventThoughtDelta:
		r.thinking = true
		if r.opt.Thoughts {
			r.write(r.paint(sgrDim, Clean(ev.Delta)))
		} else {
			r.countWords(ev.Delta)
		}
	case wire.EventThoughtEnd:
		r.endThought()
	case wire.EventToolCall:
		r.endThought()
		r.toolCall(ev)
	case wire.EventToolResult:
		r.endThought()
		r.toolResult(ev)
	case wire.EventInteractionReq:
		r.endThought()
		r.approvalRequest(ev)
	case wire.EventInteractionRes:
		r.approvalResponse(ev)
	case wire.EventUsage:
		u := usageOf(ev)
		r.usage = &u
	case wire.EventError:
		r.endThought()
		r.errShown = ev.Message
		r.line(r.paint(sgrRed, "error: ") + oneLine(Clean(ev.Message), 0))
	case wire.EventDone:
		r.endThought()
		r.stopReason = ev.StopReason
	case wire.EventData:
		if ev.Name == "network.blocked" {
			r.line(r.paint(sgrYellow, "network blocked: ") + compactJSON(ev.Data, lineRunes))
		}
	}
}

func (r *Renderer) message(ev wire.Event) {
	text := Clean(ev.Text)
	if text == "" {
		return
	}
	if ev.Role == "user" {
		r.turnStreamed = false // a new turn
		r.newline()
		for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			r.write(r.paint(sgrBold, "› "+l) + "\n")
		}
		return
	}
	if r.streamed[ev.ID] || (ev.ID == "" && r.turnStreamed) {
		return
	}
	r.newline()
	r.write(text)
	r.newline()
}

// countWords counts the words of a collapsed thought across deltas that
// may split a word.
func (r *Renderer) countWords(s string) {
	for _, c := range s {
		space := unicode.IsSpace(c)
		if !space && !r.inWord {
			r.thoughtLen++
		}
		r.inWord = !space
	}
}

func (r *Renderer) endThought() {
	if !r.thinking {
		return
	}
	r.thinking = false
	if r.opt.Thoughts {
		r.newline()
		return
	}
	r.line(r.paint(sgrDim, fmt.Sprintf("✻ thought, %d %s (-thoughts shows it)", r.thoughtLen, plural(r.thoughtLen, "word", "words"))))
}

func (r *Renderer) toolCall(ev wire.Event) {
	args := argsSummary(ev.Input)
	t, ok := r.tools[ev.ID]
	if !ok {
		t = &tool{id: ev.ID}
		r.tools[ev.ID] = t
	}
	if ev.Name != "" {
		t.title = oneLine(Clean(ev.Name), lineRunes)
	}
	if ev.Kind != "" {
		t.kind = oneLine(Clean(ev.Kind), 40)
	}
	if t.shown {
		if args != "" && args != t.args {
			t.args = args
			r.line("  " + r.paint(sgrDim, "↳ "+args))
		}
		return
	}
	t.args = args
	if args == "" {
		// Harnesses announce a call, then its arguments: show it once
		// they come, or when anything else happens first.
		r.held = t
		return
	}
	r.showTool(t)
}

func (r *Renderer) showTool(t *tool) {
	if r.held == t {
		r.held = nil
	}
	if t.shown {
		return
	}
	t.shown = true
	head := r.paint(sgrCyan, "⏺ ")
	if t.kind != "" {
		head += r.paint(sgrDim, t.kind) + " "
	}
	title := t.title
	if title == "" {
		title = "tool " + oneLine(Clean(t.id), 40)
	}
	head += r.paint(sgrBold, title)
	if t.args != "" && t.args != t.title {
		head += "  " + r.paint(sgrDim, t.args)
	}
	r.line(head)
}

func (r *Renderer) toolResult(ev wire.Event) {
	t, ok := r.tools[ev.ID]
	if !ok {
		t = &tool{id: ev.ID}
		r.tools[ev.ID] = t
	}
	r.showTool(t)
	out := Clean(textOf(ev.Output))
	lead := "  ⎿ "
	var status string
	switch {
	case ev.Denied:
		status = r.paint(sgrRed, "denied")
	case ev.IsError:
		status = r.paint(sgrRed, "failed")
	}
	if code, ok := exitCode(ev.Data); ok {
		c := "exit " + strconv.Itoa(code)
		if code != 0 {
			c = r.paint(sgrRed, c)
		}
		status = strings.TrimSpace(status + " " + c)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if strings.TrimSpace(out) == "" {
		lines = nil
	}
	if status == "" && len(lines) == 0 {
		status = r.paint(sgrDim, "done")
	}
	first := ""
	if len(lines) > 0 {
		first = oneLine(lines[0], lineRunes)
	}
	r.line(lead + strings.TrimSpace(status+" "+r.paint(sgrDim, first)))
	shown := min(len(lines), resultLines)
	for _, l := range lines[min(1, shown):shown] {
		r.line("    " + r.paint(sgrDim, oneLine(l, lineRunes)))
	}
	if n := len(lines) - shown; n > 0 {
		r.line("    " + r.paint(sgrDim, fmt.Sprintf("… +%d %s", n, plural(n, "line", "lines"))))
	}
}

// Approval is an interaction_request as a person is asked it.
type Approval struct {
	ID         string // the interaction id, for POST /v1/sessions/{id}/interactions/{iid}
	ToolCallID string
	Kind       string // the tool's kind: execute, edit, read, ...
	Title      string // what the harness calls it; the command for a shell
	Args       string // the arguments, compact and cleaned
}

// ParseApproval reads an interaction_request event; every field is cleaned.
func ParseApproval(ev wire.Event) Approval {
	var p struct {
		ToolCallID string `json:"toolCallId"`
		ToolCall   struct {
			Name  string          `json:"name"`
			Title string          `json:"title"`
			Kind  string          `json:"kind"`
			Input json.RawMessage `json:"input"`
		} `json:"toolCall"`
	}
	_ = json.Unmarshal(ev.Payload, &p)
	title := p.ToolCall.Title
	if title == "" {
		title = p.ToolCall.Name
	}
	return Approval{
		ID:         oneLine(Clean(ev.ID), 80),
		ToolCallID: oneLine(Clean(p.ToolCallID), 80),
		Kind:       oneLine(Clean(p.ToolCall.Kind), 40),
		Title:      oneLine(Clean(title), lineRunes),
		Args:       compactJSON(p.ToolCall.Input, 4*lineRunes),
	}
}

func (r *Renderer) approvalRequest(ev wire.Event) {
	a := ParseApproval(ev)
	r.interaction[a.ID] = a
	if t, ok := r.tools[a.ToolCallID]; ok {
		r.showTool(t)
	}
	what := a.Title
	if a.Kind != "" {
		what = a.Kind + " " + what
	}
	r.line(r.paint(sgrYellow, "? approval needed: ") + r.paint(sgrBold, what))
	if a.Args != "" && a.Args != "{}" {
		r.line("  " + a.Args)
	}
}

func (r *Renderer) approvalResponse(ev wire.Event) {
	var p struct {
		Approved  bool   `json:"approved"`
		DecidedBy string `json:"decidedBy"`
	}
	_ = json.Unmarshal(ev.Payload, &p)
	verdict := r.paint(sgrGreen, "allowed")
	if !p.Approved {
		verdict = r.paint(sgrRed, "denied")
	}
	if by := oneLine(Clean(p.DecidedBy), 60); by != "" {
		verdict += r.paint(sgrDim, " by "+by)
	}
	r.line("  ⎿ " + verdict)
}

// Notice writes one of the runner's own messages (not harness output).
func (r *Renderer) Notice(s string) {
	r.line(r.paint(sgrDim, s))
}

// Warn writes one of the runner's own warnings.
func (r *Renderer) Warn(s string) {
	r.line(r.paint(sgrYellow, s))
}

// Result closes the stream: the failure if there was one, then the stop
// reason, usage, cost, duration (when elapsed > 0) and the session.
func (r *Renderer) Result(res wire.Result, elapsed time.Duration) {
	if r.held != nil {
		r.showTool(r.held)
	}
	r.endThought()
	stop := res.StopReason
	if stop == "" {
		stop = r.stopReason
	}
	if !res.OK && stop != "cancelled" {
		stop = "failed"
	}
	if !res.OK && res.Error != "" && res.Error != r.errShown && res.Error != stop {
		r.line(r.paint(sgrRed, "✗ ") + oneLine(Clean(res.Error), 0))
	}
	parts := []string{oneLine(Clean(stop), 40)}
	u := res.Usage
	if u == nil {
		u = r.usage
	}
	if u != nil && (u.Input > 0 || u.Output > 0 || u.Total > 0) {
		parts = append(parts, fmt.Sprintf("%d in · %d out tokens", u.Input, u.Output))
		if u.Cost > 0 {
			parts = append(parts, fmt.Sprintf("$%.4f", u.Cost))
		}
	}
	if elapsed > 0 {
		parts = append(parts, duration(elapsed))
	}
	if res.SessionID != "" {
		parts = append(parts, "session "+oneLine(Clean(res.SessionID), 80))
	}
	r.line(r.paint(sgrDim, "─ "+strings.Join(parts, " · ")))
	r.usage, r.stopReason, r.errShown = nil, "", ""
}

func duration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

func usageOf(ev wire.Event) wire.Usage {
	var u wire.Usage
	_ = json.Unmarshal(ev.Input, &u.Input)
	_ = json.Unmarshal(ev.Output, &u.Output)
	if ev.Total != nil {
		u.Total = *ev.Total
	}
	if ev.Cost != nil {
		u.Cost = *ev.Cost
	}
	return u
}

// textOf is a tool's output as text: a JSON string unquoted, anything
// else as its JSON.
func textOf(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	// Structured output as JSON a person reads: the encoder that wrote it
	// escaped <, > and & (\u003e), which a terminal shows literally.
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// exitCode finds a shell's exit status in a tool's raw output, under the
// names harnesses use for it.
func exitCode(data json.RawMessage) (int, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return 0, false
	}
	for _, k := range []string{"exitCode", "exit_code", "returncode", "exitStatus"} {
		var n int
		if v, ok := m[k]; ok && json.Unmarshal(v, &n) == nil {
			return n, true
		}
	}
	return 0, false
}

// argsSummary is what a tool call acts on, in one line: the command, the
// path, or the compact arguments. Empty when there are none.
func argsSummary(raw json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		if len(m) == 0 {
			return ""
		}
		for _, k := range []string{"command", "cmd", "file_path", "path", "pattern", "url", "query"} {
			var s string
			if v, ok := m[k]; ok && json.Unmarshal(v, &s) == nil && s != "" && len(m) == 1 {
				return oneLine(Clean(s), lineRunes)
			}
		}
	}
	return compactJSON(raw, lineRunes)
}

func compactJSON(raw json.RawMessage, limit int) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return oneLine(Clean(string(raw)), limit)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // show `a && b`, not `a \u0026\u0026 b`
	if enc.Encode(v) != nil {
		return ""
	}
	// The encoder escapes control characters; Clean catches the rest.
	return oneLine(Clean(b.String()), limit)
}

// oneLine joins s's lines with spaces and cuts it to limit runes (0: no
// limit) with an ellipsis.
func oneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	if limit > 0 && utf8.RuneCountInString(s) > limit {
		rs := []rune(s)
		s = string(rs[:limit-1]) + "…"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
