package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/client"
	"github.com/agentrunner/runner/internal/console"
	"github.com/agentrunner/runner/internal/render"
	"github.com/agentrunner/runner/internal/wire"
)

// sessionsCommand is `runner sessions [ID]` and `runner sessions tail ID`: a
// running service's sessions, one session with its turns, or one
// session's events followed live, shown for a person on a terminal (or
// with -o text) and as the API's JSON otherwise.
type sessionsCommand struct{ stdio }

func (c sessionsCommand) run(ctx context.Context, args []string) int {
	cfg, ok := loadConfig(c.environ, c.stderr)
	if !ok && !wantsHelp(args) {
		return 2
	}
	name := "runner sessions"
	tail := len(args) > 0 && args[0] == "tail"
	if tail {
		name, args = "runner sessions tail", args[1:]
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	base := fs.String("url", "http://"+loopbackAddr(cfg.Addr()), "base URL of the runner")
	output := fs.String("o", "", "output: text (the default on a terminal) or json (ndjson for tail)")
	project := fs.String("project", "", "the sessions' project (a session id is unique only within its project); none: the sessions of requests that named no project, or every project's in the list")
	var after *int64
	var thoughts *bool
	if tail {
		after = fs.Int64("after", 0, "start after this event sequence number (0: the whole log)")
		thoughts = fs.Bool("thoughts", false, "show the harness's thoughts in full, dimmed")
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: runner sessions [flags]           list the sessions, most recent first\n"+
			"       runner sessions [flags] ID        one session: its turns and pending approvals\n"+
			"       runner sessions tail [flags] ID   follow its events live, rendered (Ctrl-C stops)\n\n"+
			"The service's token comes from AGENTA_RUNNER_TOKEN.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, c.stdout); !ok {
		return code
	}
	mode := *output
	switch {
	case mode == "" && isTerminal(c.stdout):
		mode = "text"
	case mode == "" && tail:
		mode = "ndjson"
	case mode == "":
		mode = "json"
	case mode == "ndjson" && !tail, mode != "text" && mode != "json" && mode != "ndjson":
		fmt.Fprintf(c.stderr, "%s: -o %q: want text or json\n", name, mode)
		return 2
	}
	if cfg.HTTP.Token == "" {
		fmt.Fprintf(c.stderr, "%s: set AGENTA_RUNNER_TOKEN to the service's token\n", name)
		return 2
	}
	sc := sessionsClient{c: client.Client{Base: strings.TrimRight(*base, "/"), Token: cfg.HTTP.Token}, name: name, stderr: c.stderr}
	color := render.ColorEnabled(isTerminal(c.stdout), envLookup(c.environ))
	if tail {
		if fs.NArg() != 1 {
			fmt.Fprintln(c.stderr, "runner sessions tail: give one session id")
			return 2
		}
		opt := render.Options{Color: color, Thoughts: *thoughts}
		return sc.tail(ctx, fs.Arg(0), *project, *after, mode, opt, c.stdout)
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(c.stderr, "runner sessions: at most one session id (or: runner sessions tail ID)")
		return 2
	}
	path := "/v1/sessions"
	if fs.NArg() == 1 {
		path += "/" + url.PathEscape(fs.Arg(0))
	}
	if *project != "" {
		path += "?projectId=" + url.QueryEscape(*project)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, ok := sc.get(rctx, path)
	if !ok {
		return 1
	}
	if mode == "json" {
		fmt.Fprint(c.stdout, string(body))
		return 0
	}
	if fs.NArg() == 1 {
		var v console.SessionView
		if err := json.Unmarshal(body, &v); err != nil {
			fmt.Fprintf(c.stderr, "%s: the service sent %v\n", name, err)
			return 1
		}
		console.ShowSession(c.stdout, v)
		return 0
	}
	var list struct {
		Sessions []console.SessionView `json:"sessions"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		fmt.Fprintf(c.stderr, "%s: the service sent %v\n", name, err)
		return 1
	}
	console.ListSessions(c.stdout, list.Sessions, time.Now())
	return 0
}

// sessionsClient is the service's client, its errors written to stderr
// under the command's name.
type sessionsClient struct {
	c      client.Client
	name   string
	stderr io.Writer
}

func (c sessionsClient) do(ctx context.Context, path string) (*http.Response, bool) {
	resp, err := c.c.Open(ctx, http.MethodGet, path, nil)
	return resp, c.ok(err)
}

// serviceMessage is the error an answer carries ({"error": …}, else its
// text), safe to print.
func serviceMessage(body []byte) string { return render.Clean(client.ErrorMessage(body)) }

func (c sessionsClient) get(ctx context.Context, path string) ([]byte, bool) {
	body, err := c.c.Get(ctx, path)
	return body, c.ok(err)
}

// ok writes err, if any, under the command's name: a refusal as its
// status and the service's message, made safe for a terminal.
func (c sessionsClient) ok(err error) bool {
	var se *client.StatusError
	switch {
	case errors.As(err, &se):
		fmt.Fprintf(c.stderr, "%s: %s: %s\n", c.name, se.Status, render.Clean(se.Message))
	case err != nil:
		fmt.Fprintf(c.stderr, "%s: %v\n", c.name, err)
	default:
		return true
	}
	return false
}

// tail follows the session's event log live until ctx ends (Ctrl-C).
func (c sessionsClient) tail(ctx context.Context, id, project string, after int64, mode string, opt render.Options, stdout io.Writer) int {
	path := "/v1/sessions/" + url.PathEscape(id) + "/events?follow=1"
	if project != "" {
		path += "&projectId=" + url.QueryEscape(project)
	}
	if after > 0 {
		path += "&after=" + strconv.FormatInt(after, 10)
	}
	resp, ok := c.do(ctx, path)
	if !ok {
		return 1
	}
	defer resp.Body.Close()
	screen := render.New(stdout, opt)
	sc := client.Lines(resp.Body)
	for sc.Scan() {
		if mode != "text" {
			fmt.Fprintln(stdout, sc.Text())
			continue
		}
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			fmt.Fprintf(c.stderr, "%s: the service sent a bad NDJSON line: %v\n", c.name, err)
			return 1
		}
		screen.Record(rec)
		if rec.Event != nil && rec.Event.Type == wire.EventDone {
			// The log has no result records: close each turn here.
			screen.Result(wire.Result{OK: rec.Event.StopReason != "error", StopReason: rec.Event.StopReason}, 0)
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.name, err)
		return 1
	}
	return 0
}
