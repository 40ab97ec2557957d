// Package console runs `runner run`'s turn for a person at a terminal:
// shown as it happens (or as JSON / NDJSON for a program), each approval
// the turn pauses for asked on the terminal with one key, Ctrl-C turned
// into a clean cancel of the turn (twice: an immediate exit), and a pause
// nobody here can answer explained with the HTTP call that answers it.
// Where the turn runs (in-process or on a service) is the Turns the
// caller gives. It also shows a running service's sessions and health
// for a person (show.go).
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/agentrunner/runner/internal/render"
	"github.com/agentrunner/runner/internal/wire"
)

// Turns runs a Session's turns, in this process or on a running service,
// with the same events either way.
type Turns interface {
	// Run runs req, sending its events to sink as they happen.
	Run(ctx context.Context, req *wire.Request, sink func(seq int64, ev wire.Event)) wire.Result
	// Decide answers a paused turn's interaction and runs the rest of it:
	// the same parked harness process when it is still warm.
	Decide(ctx context.Context, req *wire.Request, interactionID string, approved bool, sink func(seq int64, ev wire.Event)) wire.Result
	// Cancel stops req's session turn (a session's turn outlives its
	// caller; a sessionless one stops with its context).
	Cancel(ctx context.Context, req *wire.Request)
}

// Exit codes of `runner run` besides 0 (done), 1 (failed), 2 (usage).
const (
	ExitPaused      = 3   // paused for a decision nobody could give here
	ExitInterrupted = 130 // Ctrl-C
)

// Session is one `runner run`: the turn, its continuations after each
// decision, and the Ctrl-C handling around them. Set the exported fields,
// then call Run once.
type Session struct {
	Turns   Turns
	Request *wire.Request
	// Mode is the output: text (Screen shows the turn), json (the
	// result) or ndjson (the records as they come).
	Mode   string
	Stdout io.Writer
	Stderr io.Writer
	Screen *render.Renderer // text mode
	// Remote says the turn runs on the service at ServiceURL, where a
	// pause can be answered over HTTP after this process ends.
	Remote     bool
	ServiceURL string
	Answers    <-chan string // keys typed on the terminal (Keys); nil without one
	TTY        *os.File      // the terminal answers come from

	start     time.Time
	mu        sync.Mutex // the turn's sink and the Ctrl-C notice both write
	pending   []render.Approval
	answered  map[string]bool
	cancelled bool // Ctrl-C or the caller's cancellation
	prompting bool // a question waits for its answer on the terminal
	// restoreTTY puts the terminal back from single-key input; set while
	// a question is asked.
	restoreTTY func()
}

func (r *Session) sink(seq int64, ev wire.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ev.Type {
	case wire.EventInteractionReq:
		r.pending = append(r.pending, render.ParseApproval(ev))
	case wire.EventInteractionRes:
		r.answered[ev.ID] = true
	}
	switch r.Mode {
	case "text":
		r.Screen.Event(ev)
	case "ndjson":
		_ = json.NewEncoder(r.Stdout).Encode(wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &ev})
	}
}

func (r *Session) result(res wire.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.Mode {
	case "text":
		if r.cancelled {
			// The runner says how it stopped the turn (/kill, or a
			// pause nobody answers now); the person pressed Ctrl-C.
			res.StopReason = "cancelled"
			if !res.OK {
				res.Error = "cancelled"
			}
		}
		r.Screen.Result(res, time.Since(r.start))
	case "ndjson":
		res.Events = []wire.Event{}
		_ = json.NewEncoder(r.Stdout).Encode(wire.Record{Kind: wire.RecordResult, Result: &res})
	default:
		enc := json.NewEncoder(r.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	}
}

func (r *Session) notice(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Screen != nil {
		if r.prompting {
			fmt.Fprintln(r.Stdout) // the question's line is still open
		}
		r.Screen.Warn(s)
		return
	}
	fmt.Fprintln(r.Stderr, "runner run:", s)
}

// Run runs the turn to its end, asking on the terminal for each
// approval it pauses for, and returns the process's exit code.
func (r *Session) Run(ctx context.Context) int {
	r.start = time.Now()
	if r.answered == nil {
		r.answered = map[string]bool{}
	}
	// The turn runs on its own context: Ctrl-C cancels it the way the
	// runner cancels turns (a session's through Kill), not by dropping it.
	turnCtx, cancelTurn := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTurn()
	interrupted := make(chan struct{})
	stop := r.watchInterrupts(ctx, cancelTurn, interrupted)
	defer stop()

	res := r.Turns.Run(turnCtx, r.Request, r.sink)
	for res.OK && res.StopReason == "paused" {
		select {
		case <-interrupted:
			r.result(res)
			return ExitInterrupted
		default:
		}
		a, ok := r.nextPending()
		if !ok {
			break
		}
		if r.Answers == nil {
			r.result(res)
			r.explainPause(a)
			return ExitPaused
		}
		approved, ok := r.askFor(a, interrupted)
		if !ok {
			r.result(res)
			if isClosed(interrupted) {
				return ExitInterrupted
			}
			r.explainPause(a)
			return ExitPaused
		}
		r.mu.Lock()
		r.answered[a.ID] = true
		r.mu.Unlock()
		res = r.Turns.Decide(turnCtx, r.Request, a.ID, approved, r.sink)
	}
	r.result(res)
	switch {
	case isClosed(interrupted):
		return ExitInterrupted
	case !res.OK:
		return 1
	case res.StopReason == "paused":
		return ExitPaused
	}
	return 0
}

func (r *Session) nextPending() (render.Approval, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.pending {
		if !r.answered[a.ID] {
			return a, true
		}
	}
	return render.Approval{}, false
}

// askFor asks allow once / deny on the terminal until it gets an answer;
// ok is false when the terminal closed or Ctrl-C came first.
func (r *Session) askFor(a render.Approval, interrupted <-chan struct{}) (approved, ok bool) {
	// One key answers, no Enter (the terminal's pending input is dropped
	// as it switches).
	if r.TTY != nil {
		if restore, err := cbreak(r.TTY); err == nil {
			r.mu.Lock()
			r.restoreTTY = restore
			r.mu.Unlock()
			defer r.restoreTerminal()
		}
	}
	// Keys typed while the turn ran are not answers to a question they
	// never saw.
	for drained := false; !drained; {
		select {
		case _, open := <-r.Answers:
			if !open {
				fmt.Fprintln(r.Stdout)
				return false, false
			}
		default:
			drained = true
		}
	}
	for {
		r.mu.Lock()
		fmt.Fprint(r.Stdout, "  allow once [a] / deny [d]? ")
		r.prompting = true
		r.mu.Unlock()
		var line string
		open := true
		select {
		case <-interrupted:
		case line, open = <-r.Answers:
		}
		r.mu.Lock()
		r.prompting = false
		r.mu.Unlock()
		select {
		case <-interrupted:
			return false, false
		default:
		}
		if !open {
			fmt.Fprintln(r.Stdout)
			return false, false
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "a", "y":
			fmt.Fprintln(r.Stdout) // the terminal echoed the key; no Enter came
			return true, true
		case "d", "n":
			fmt.Fprintln(r.Stdout)
			return false, true
		}
		fmt.Fprintln(r.Stdout)
	}
}

// restoreTerminal puts the terminal back from single-key input, if a
// question had switched it.
func (r *Session) restoreTerminal() {
	r.mu.Lock()
	restore := r.restoreTTY
	r.restoreTTY = nil
	r.mu.Unlock()
	if restore != nil {
		restore()
	}
}

// explainPause fails fast where nobody can answer: the interaction's id
// and the HTTP call that answers it.
func (r *Session) explainPause(a render.Approval) {
	what := strings.TrimSpace(a.Kind + " " + a.Title)
	if a.Args != "" && a.Args != "{}" {
		what += " " + a.Args
	}
	how := "Answer it over HTTP:"
	if !r.Remote {
		how = "This process held the paused turn and ends now; run it on a service (`runner serve`, then runner run -url) to answer over HTTP:"
	}
	fmt.Fprintf(r.Stderr, "runner run: paused for approval of %s: interaction %s in session %s, and there is no terminal to ask on.\n"+
		"%s\n"+
		"  curl -sS -X POST -H \"Authorization: Bearer $AGENTA_RUNNER_TOKEN\" -H 'Content-Type: application/json' -H 'Accept: application/x-ndjson' -d '{\"approved\":true}' %s/v1/sessions/%s/interactions/%s\n",
		what, a.ID, render.Clean(r.Request.SessionID), how, r.ServiceURL, render.Clean(r.Request.SessionID), a.ID)
}

// watchInterrupts turns the first Ctrl-C (or the caller's cancellation)
// into a clean cancel of the turn, and a second Ctrl-C into an immediate
// exit. The returned stop waits for it.
func (r *Session) watchInterrupts(ctx context.Context, cancelTurn context.CancelFunc, interrupted chan struct{}) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	first := func() {
		once.Do(func() {
			r.mu.Lock()
			r.cancelled = true
			r.mu.Unlock()
			r.notice("cancelling the turn (Ctrl-C again quits at once)")
			close(interrupted) // after the notice: a question's open line is closed first
			if r.Request.SessionID == "" {
				cancelTurn()
				return
			}
			wg.Go(func() {
				kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				r.Turns.Cancel(kctx, r.Request)
				cancelTurn()
			})
		})
	}
	wg.Go(func() {
		done := ctx.Done()
		n := 0
		for {
			select {
			case <-quit:
				return
			case <-done:
				done = nil
				first()
			case <-sigs:
				if n++; n > 1 {
					r.restoreTerminal() // os.Exit runs no defers
					fmt.Fprintln(r.Stderr, "\nrunner run: interrupted")
					os.Exit(ExitInterrupted)
				}
				first()
			}
		}
	})
	return func() {
		signal.Stop(sigs)
		close(quit)
		wg.Wait()
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// ControllingTerminal reads answers from /dev/tty; nil without one.
func ControllingTerminal() (*os.File, <-chan string) {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return nil, nil
	}
	if !isatty.IsTerminal(f.Fd()) {
		f.Close()
		return nil, nil
	}
	return f, Keys(f) // f stays open for the process's life, like stdin
}
