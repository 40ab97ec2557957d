package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/client"
	"github.com/agentrunner/runner/internal/config"
	"github.com/agentrunner/runner/internal/console"
	"github.com/agentrunner/runner/internal/render"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox/egress"
	"github.com/agentrunner/runner/internal/wire"
)

// Exit codes of `runner run` besides 0 (done), 1 (failed), 2 (usage):
// its console session's.
const (
	exitPaused      = console.ExitPaused
	exitInterrupted = console.ExitInterrupted
)

// runCommand is `runner run`: one turn in-process with the service's engine,
// or on a running service with -url, shown for a person (-o text, the
// default on a terminal) or as the machine output (-o json, ndjson).
type runCommand struct{ stdio }

// runFlags are `runner run`'s flags.
type runFlags struct {
	harness, sandbox, prompt, model, output         *string
	stream, thoughts, ask                           *bool
	session, project, workdir, requestFile, baseURL *string
}

func newRunFlags(stderr io.Writer) (*flag.FlagSet, runFlags) {
	fs := flag.NewFlagSet("runner run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := runFlags{
		harness:     fs.String("harness", "", "harness name (claude, codex, pi_core, gemini, opencode, or one from AGENTA_RUNNER_HARNESS_<NAME>)"),
		sandbox:     fs.String("sandbox", "", "sandbox provider (default: AGENTA_RUNNER_DEFAULT_SANDBOX_PROVIDER)"),
		prompt:      fs.String("prompt", "", "user message (or give it as the arguments); without either the request is read as JSON from stdin"),
		model:       fs.String("model", "", "model id"),
		output:      fs.String("o", "", "output: text (the default on a terminal), json (the default otherwise) or ndjson"),
		stream:      fs.Bool("stream", false, "same as -o ndjson"),
		thoughts:    fs.Bool("thoughts", false, "text output: show the harness's thoughts in full, dimmed"),
		ask:         fs.Bool("ask", false, "ask on the terminal before each tool call (permissions.default ask)"),
		session:     fs.String("session", "", "continue this session, or start it: warm on a running service that holds it, cold from the ledger otherwise"),
		project:     fs.String("project", "", "the session's project (default: cli)"),
		workdir:     fs.String("workdir", "", "run the harness in this directory, bound writable into the sandbox (in-process only)"),
		requestFile: fs.String("request", "", "a run request as a JSON file (model connection, permissions, ...); the prompt is added as its last user message"),
		baseURL:     fs.String("url", "", "run on the service at this base URL (token from AGENTA_RUNNER_TOKEN) instead of in-process"),
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: runner run [flags] [prompt…]   (or a request as JSON on stdin)\n\n"+
			"Runs one turn, in this process or on a running service, shown as it happens.\n\n"+
			"Exit status: 0 the turn ended well; 1 it failed (the error is shown); 2 bad flags or\n"+
			"request; 3 it paused for an approval nobody here could give (answer it with -url on\n"+
			"the service); 130 interrupted (Ctrl-C).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, f
}

// mode is the output mode the flags ask for; terminal says whether
// stdout is one.
func (f runFlags) mode(terminal bool) (string, error) {
	mode := *f.output
	switch {
	case *f.stream && mode != "" && mode != "ndjson":
		return "", fmt.Errorf("-stream is -o ndjson; it contradicts -o %s", mode)
	case *f.stream:
		mode = "ndjson"
	case mode == "" && terminal:
		mode = "text"
	case mode == "":
		mode = "json"
	case mode != "text" && mode != "json" && mode != "ndjson":
		return "", fmt.Errorf("-o %q: want text, json or ndjson", mode)
	}
	return mode, nil
}

func (c runCommand) run(ctx context.Context, args []string) int {
	fs, f := newRunFlags(c.stderr)
	if code, ok := parseFlags(fs, args, c.stdout); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(c.stderr, "runner run: %v\n", err)
		return 2
	}
	mode, err := f.mode(isTerminal(c.stdout))
	if err != nil {
		return fail(err)
	}
	cfg, ok := loadConfig(c.environ, c.stderr)
	if !ok {
		return 2
	}
	req, piped, err := c.request(f, fs.Args(), cfg.HTTP.MaxBodyBytes)
	if err != nil {
		return fail(err)
	}
	if req.Consumed {
		c.stdin = nil // consumed: nothing left to answer approvals with
	}
	if cfg.Workdir, err = f.hostWorkdir(cfg.Workdir); err != nil {
		return fail(err)
	}
	serviceURL := "http://" + loopbackAddr(cfg.Addr())
	base, found := *f.baseURL, false
	if base == "" && req.SessionID != "" && cfg.Workdir == "" && cfg.HTTP.Token != "" && serviceAt(ctx, serviceURL, cfg.HTTP.Token) {
		base, found = serviceURL, true // the service may hold the session warm
	}
	if base == "" && cfg.Workdir != "" && healthAt(ctx, serviceURL) {
		// -workdir binds a directory of this machine, so the turn runs
		// here even with a service up: say so, it holds no warm state of
		// this turn and its settings do not apply.
		fmt.Fprintf(c.stderr, "runner: running in-process (-workdir binds a directory of this machine); the service at %s is not used\n", serviceURL)
	}

	var backend console.Turns
	if base != "" {
		if cfg.HTTP.Token == "" {
			return fail(errors.New("-url needs AGENTA_RUNNER_TOKEN, the service's token"))
		}
		serviceURL = strings.TrimRight(base, "/")
		backend = serviceTurns{client.Client{Base: serviceURL, Token: cfg.HTTP.Token, HTTP: &http.Client{}}}
	} else {
		svc, stop, err := c.localService(ctx, cfg, mode)
		if err != nil {
			fmt.Fprintln(c.stderr, "runner:", err)
			return 1
		}
		defer stop()
		backend = localTurns{svc: svc, service: serviceURL}
	}

	r := &console.Session{
		Turns: backend, Request: req.Request, Mode: mode, Stdout: c.stdout, Stderr: c.stderr,
		Remote: base != "", ServiceURL: serviceURL,
	}
	if mode == "text" {
		r.Screen = render.New(c.stdout, render.Options{Color: render.ColorEnabled(isTerminal(c.stdout), envLookup(c.environ)), Thoughts: *f.thoughts})
		if found {
			r.Screen.Notice("on the service at " + serviceURL)
		}
		if f, ok := c.stdin.(*os.File); ok && isTerminal(f) {
			r.TTY, r.Answers = f, console.Keys(f)
		} else if piped && isTerminal(c.stdout) {
			// The request came on stdin: ask on the terminal the
			// person sees the turn on.
			r.TTY, r.Answers = console.ControllingTerminal()
		}
	}
	return r.Run(ctx)
}

// runRequest is the turn's request as the flags and arguments make it.
type runRequest struct {
	*wire.Request
	// Consumed says the request was read from stdin, which is then no
	// longer there to answer approvals with.
	Consumed bool
}

// request builds the turn's request from the flags and arguments: the
// prompt, a -request file, or a request on stdin, with the flags'
// settings over it. piped reports that stdin was a file (not a reader
// in a test) it came on.
func (c runCommand) request(f runFlags, args []string, maxBody int64) (req runRequest, piped bool, err error) {
	text := *f.prompt
	if text == "" && len(args) > 0 {
		text = strings.Join(args, " ")
	} else if len(args) > 0 {
		return req, false, errors.New("give the prompt once: -prompt or arguments, not both")
	}
	switch {
	case *f.requestFile != "":
		if req.Request, err = requestFrom(*f.requestFile, text, maxBody); err != nil {
			return req, false, fmt.Errorf("-request %s: %v", *f.requestFile, err)
		}
	case text != "":
		req.Request = &wire.Request{Messages: []wire.Message{{Role: "user", Content: wire.MessageContent{Text: text, IsText: true}}}}
	default:
		if f, ok := c.stdin.(*os.File); ok && isTerminal(f) {
			return req, false, errors.New("give a prompt (-prompt or arguments), or pipe a run request as JSON on stdin")
		}
		body, err := io.ReadAll(io.LimitReader(c.stdin, maxBody+1))
		if err != nil {
			return req, false, fmt.Errorf("read stdin: %v", err)
		}
		if int64(len(body)) > maxBody {
			return req, false, fmt.Errorf("request larger than %d bytes (AGENTA_RUNNER_MAX_BODY_BYTES)", maxBody)
		}
		if req.Request, err = wire.Decode(body); err != nil {
			return req, false, err
		}
		_, piped = c.stdin.(*os.File)
		req.Consumed = true
	}
	f.apply(req.Request)
	return req, piped, nil
}

// apply puts the flags' settings over r.
func (f runFlags) apply(r *wire.Request) {
	if *f.harness != "" {
		r.Harness = *f.harness
	}
	if *f.sandbox != "" {
		r.Sandbox = *f.sandbox
	}
	if *f.model != "" {
		r.Model = *f.model
	}
	if *f.session != "" {
		r.SessionID = *f.session
	}
	if *f.ask {
		if r.Permissions == nil {
			r.Permissions = &wire.Permissions{}
		}
		r.Permissions.Default = "ask"
		if r.SessionID == "" {
			// Only a session's turn can pause for a decision.
			r.SessionID = "cli-" + randomID()
		}
	}
	if *f.project != "" {
		r.ProjectID = *f.project
	}
	if r.SessionID != "" && r.ProjectID == "" && (r.RunContext == nil || r.RunContext.Project == nil) {
		r.ProjectID = "cli"
	}
}

// hostWorkdir is -workdir made absolute and checked to be a directory,
// or def without the flag.
func (f runFlags) hostWorkdir(def string) (string, error) {
	if *f.workdir == "" {
		return def, nil
	}
	if *f.baseURL != "" {
		return "", errors.New("-workdir names a directory of this machine; it runs in-process only, not with -url")
	}
	abs, err := filepath.Abs(*f.workdir)
	if err == nil {
		var st os.FileInfo
		if st, err = os.Stat(abs); err == nil && !st.IsDir() {
			err = errors.New("not a directory")
		}
	}
	if err != nil {
		return "", fmt.Errorf("-workdir %s: %v", *f.workdir, err)
	}
	return abs, nil
}

// localService builds the service's engine in this process, for a turn
// without a running service; stop shuts it down.
func (c runCommand) localService(ctx context.Context, cfg config.Config, mode string) (svc *runner.Service, stop func(), err error) {
	level := "warn"
	if mode == "text" {
		level = "error" // a failed turn is shown by the renderer
	}
	log := newLogger(c.stderr, level)
	eg, err := egress.New(cfg.Local.NetworkAllow)
	if err != nil {
		return nil, nil, err
	}
	if cfg.ReplicaID, err = cliReplicaID(cfg); err != nil {
		return nil, nil, err
	}
	svc, _, closeStore, err := buildService(ctx, cfg, c.environ, log, nil, eg)
	if err != nil {
		return nil, nil, err
	}
	return svc, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = svc.Shutdown(sctx)
		closeStore()
	}, nil
}

// loopbackAddr is addr with an unspecified host (0.0.0.0, ::, none)
// replaced by loopback, to dial the local service.
func loopbackAddr(addr string) string {
	for _, any := range []string{"0.0.0.0:", "[::]:", ":"} {
		if rest, ok := strings.CutPrefix(addr, any); ok {
			return "127.0.0.1:" + rest
		}
	}
	return addr
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestFrom reads a run request from a file and appends the prompt,
// if any, as a user message: the settings a person keeps, with the
// question of the moment.
func requestFrom(path, prompt string, limit int64) (*wire.Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("larger than %d bytes (AGENTA_RUNNER_MAX_BODY_BYTES)", limit)
	}
	if prompt != "" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		var msgs []json.RawMessage
		if raw, ok := m["messages"]; ok {
			if err := json.Unmarshal(raw, &msgs); err != nil {
				return nil, fmt.Errorf("messages: %w", err)
			}
		}
		msg, _ := json.Marshal(map[string]string{"role": "user", "content": prompt})
		m["messages"], _ = json.Marshal(append(msgs, msg))
		body, _ = json.Marshal(m)
	}
	return wire.Decode(body)
}
