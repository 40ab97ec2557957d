package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agentrunner/runner/internal/wire"
)

// runTurn is `runner run`: one turn in-process with the service's engine.
func runTurn(ctx context.Context, args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runner run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	harness := fs.String("harness", "", "harness name (claude, codex, pi_core, gemini, opencode, or one from AGENTA_RUNNER_HARNESS_<NAME>)")
	sandboxName := fs.String("sandbox", "", "sandbox provider (default: AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER)")
	prompt := fs.String("prompt", "", "user message; without it the request is read as JSON from stdin")
	model := fs.String("model", "", "model id")
	stream := fs.Bool("stream", false, "print NDJSON records instead of one JSON result")
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	cfg, ok := loadConfig(environ, stderr)
	if !ok {
		return 2
	}

	var req *wire.Request
	if *prompt != "" {
		req = &wire.Request{Messages: []wire.Message{{Role: "user", Content: wire.MessageContent{Text: *prompt, IsText: true}}}}
	} else {
		if f, ok := stdin.(*os.File); ok && isTerminal(f) {
			fmt.Fprintln(stderr, "runner run: give --prompt, or pipe a run request as JSON on stdin")
			return 2
		}
		body, err := io.ReadAll(io.LimitReader(stdin, cfg.MaxBodyBytes+1))
		if err != nil {
			fmt.Fprintln(stderr, "runner run: read stdin:", err)
			return 2
		}
		if int64(len(body)) > cfg.MaxBodyBytes {
			fmt.Fprintf(stderr, "runner run: request larger than %d bytes (AGENTA_RUNNER_MAX_BODY_BYTES)\n", cfg.MaxBodyBytes)
			return 2
		}
		if req, err = wire.Decode(body); err != nil {
			fmt.Fprintln(stderr, "runner run:", err)
			return 2
		}
	}
	if *harness != "" {
		req.Harness = *harness
	}
	if *sandboxName != "" {
		req.Sandbox = *sandboxName
	}
	if *model != "" {
		req.Model = *model
	}

	log := newLogger(stderr, "warn")
	svc, closeStore, err := buildService(ctx, cfg, environ, log)
	if err != nil {
		fmt.Fprintln(stderr, "runner:", err)
		return 1
	}
	defer closeStore()
	defer func() { _ = svc.Shutdown(context.WithoutCancel(ctx)) }()
	live := isTerminal(stdout) && !*stream
	enc := json.NewEncoder(stdout)
	res, _ := svc.Run(ctx, req, func(seq int64, ev wire.Event) {
		switch {
		case *stream:
			_ = enc.Encode(wire.Record{Kind: wire.RecordEvent, Seq: seq, Event: &ev})
		case live && ev.Type == wire.EventMessageDelta:
			fmt.Fprint(stderr, ev.Delta) // the text as it streams; the result follows on stdout
		case live && ev.Type == wire.EventToolCall:
			fmt.Fprintf(stderr, "\n[tool %s %s]\n", ev.Name, ev.Input)
		}
	})
	if live {
		fmt.Fprintln(stderr)
	}
	if *stream {
		res.Events = []wire.Event{}
		_ = enc.Encode(wire.Record{Kind: wire.RecordResult, Result: &res})
	} else {
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	}
	if !res.OK {
		return 1
	}
	return 0
}
