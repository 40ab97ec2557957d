package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrunner/runner/internal/client"
	"github.com/agentrunner/runner/internal/jobs"
	"github.com/agentrunner/runner/internal/render"
)

// jobsCommand is `runner jobs submit|list|show|cancel|run|tail`: a running
// service's background jobs, for a person on a terminal (or -o text) and
// as the API's JSON otherwise.
type jobsCommand struct{ stdio }

func (c jobsCommand) run(ctx context.Context, args []string) int {
	cfg, ok := loadConfig(c.environ, c.stderr)
	if !ok && !wantsHelp(args) {
		return 2
	}
	verbs := "submit list show cancel run tail"
	if len(args) == 0 || !strings.Contains(" "+verbs+" ", " "+args[0]+" ") {
		if wantsHelp(args) {
			fmt.Fprintf(c.stdout, "usage: runner jobs %s [flags] [ID]\n", strings.ReplaceAll(verbs, " ", "|"))
			return 0
		}
		fmt.Fprintf(c.stderr, "usage: runner jobs %s [flags] [ID]\n", strings.ReplaceAll(verbs, " ", "|"))
		return 2
	}
	verb, name := args[0], "runner jobs "+args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	base := fs.String("url", "http://"+loopbackAddr(cfg.Addr()), "base URL of the runner")
	output := fs.String("o", "", "output: text (the default on a terminal) or json")
	project := fs.String("project", "", "the jobs' project")
	file := fs.String("f", "-", "submit: the job (POST /v1/jobs's JSON body) from this file; - is stdin")
	status := fs.String("status", "", "list: only jobs in this status")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: runner jobs submit [-f FILE]   queue a job (its JSON body on stdin or in FILE)\n"+
			"       runner jobs list [-status S]   the jobs, newest first\n"+
			"       runner jobs show ID            one job: attempts, result, deliveries\n"+
			"       runner jobs cancel ID          cancel it (a running turn is stopped as /kill does)\n"+
			"       runner jobs run ID             fire a scheduled job's run now\n"+
			"       runner jobs tail ID            follow its turn's events live\n\n"+
			"The service's token comes from AGENTA_RUNNER_TOKEN.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args[1:], c.stdout); !ok {
		return code
	}
	mode := *output
	if mode == "" {
		mode = map[bool]string{true: "text", false: "json"}[isTerminal(c.stdout)]
	}
	if mode != "text" && mode != "json" {
		fmt.Fprintf(c.stderr, "%s: -o %q: want text or json\n", name, mode)
		return 2
	}
	if cfg.HTTP.Token == "" {
		fmt.Fprintf(c.stderr, "%s: set AGENTA_RUNNER_TOKEN to the service's token\n", name)
		return 2
	}
	needID := verb != "submit" && verb != "list"
	if needID != (fs.NArg() == 1) || fs.NArg() > 1 {
		fmt.Fprintf(c.stderr, "%s: %s\n", name, map[bool]string{true: "give one job id", false: "takes no argument"}[needID])
		return 2
	}
	sc := sessionsClient{c: client.Client{Base: strings.TrimRight(*base, "/"), Token: cfg.HTTP.Token}, name: name, stderr: c.stderr}
	method, path, body, err := c.request(verb, fs.Arg(0), *project, *status, *file)
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: read the job: %v\n", name, err)
		return 1
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, ok := sc.send(rctx, method, path, body)
	if !ok {
		return 1
	}
	return c.show(ctx, sc, verb, mode, fs.Arg(0), out)
}

// request is the call verb makes of /v1/jobs: submit's body is read from
// file (- for stdin); id is empty for submit and list.
func (c jobsCommand) request(verb, id, project, status, file string) (method, path string, body []byte, err error) {
	q := url.Values{}
	if project != "" {
		q.Set("projectId", project)
	}
	if status != "" {
		q.Set("status", status)
	}
	path = "/v1/jobs"
	if id != "" {
		path += "/" + url.PathEscape(id)
	}
	method = http.MethodGet
	switch verb {
	case "submit":
		if file == "-" {
			body, err = io.ReadAll(io.LimitReader(c.stdin, 64<<20))
		} else {
			body, err = os.ReadFile(file)
		}
		if err != nil {
			return "", "", nil, err
		}
		method = http.MethodPost
	case "cancel":
		method = http.MethodDelete
	case "run":
		method, path = http.MethodPost, path+"/run"
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return method, path, body, nil
}

// show writes the service's answer out to verb as mode asks; tail follows
// the job's session instead.
func (c jobsCommand) show(ctx context.Context, sc sessionsClient, verb, mode, id string, out []byte) int {
	name := sc.name
	if verb == "tail" {
		var j jobs.Job
		if err := json.Unmarshal(out, &j); err != nil || j.SessionID == "" {
			fmt.Fprintf(c.stderr, "%s: job %s has no session yet (status %s); try again once it runs\n", name, id, j.Status)
			return 1
		}
		opt := render.Options{Color: render.ColorEnabled(isTerminal(c.stdout), envLookup(c.environ))}
		tailMode := map[bool]string{true: "text", false: "ndjson"}[mode == "text"]
		return sc.tail(ctx, j.SessionID, j.ProjectID, 0, tailMode, opt, c.stdout)
	}
	if mode == "json" {
		fmt.Fprint(c.stdout, string(out))
		return 0
	}
	if verb == "list" {
		var list struct {
			Jobs []jobs.Job `json:"jobs"`
		}
		if err := json.Unmarshal(out, &list); err != nil {
			fmt.Fprintf(c.stderr, "%s: the service sent %v\n", name, err)
			return 1
		}
		listJobs(c.stdout, list.Jobs, time.Now())
		return 0
	}
	var j jobs.Job
	if err := json.Unmarshal(out, &j); err != nil {
		fmt.Fprintf(c.stderr, "%s: the service sent %v\n", name, err)
		return 1
	}
	showJob(c.stdout, j)
	return 0
}

// send is one request with a JSON body (nil for none); a status other
// than 2xx is reported with the service's message.
func (c sessionsClient) send(ctx context.Context, method, path string, body []byte) ([]byte, bool) {
	if body == nil {
		body = []byte{} // sent as JSON, empty
	}
	resp, err := c.c.Do(ctx, method, path, body)
	if !c.ok(err) {
		return nil, false
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if !c.ok(err) {
		return nil, false
	}
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(c.stderr, "%s: %s: %s\n", c.name, resp.Status, serviceMessage(out))
		return nil, false
	}
	return out, true
}

func listJobs(w io.Writer, list []jobs.Job, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tPROJECT\tSTATUS\tSCHEDULE\tRUNS\tCREATED")
	for _, j := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\n", render.Clean(j.ID), render.Clean(j.ProjectID), j.Status, scheduleText(j.Schedule), j.Runs, now.Sub(j.CreatedAt).Round(time.Second))
	}
	_ = tw.Flush()
}

func scheduleText(s *jobs.Schedule) string {
	switch {
	case s == nil:
		return "-"
	case s.Cron != "":
		return render.Clean(strings.TrimSpace(s.Cron + " " + s.Timezone))
	}
	return (time.Duration(s.IntervalMs) * time.Millisecond).String()
}

func showJob(w io.Writer, j jobs.Job) {
	fmt.Fprintf(w, "job %s  project %s  %s  schedule %s  runs %d\n", render.Clean(j.ID), render.Clean(j.ProjectID), j.Status, scheduleText(j.Schedule), j.Runs)
	if j.SessionID != "" {
		fmt.Fprintf(w, "  session %s  turn %s\n", render.Clean(j.SessionID), render.Clean(j.TurnID))
	}
	if j.InteractionID != "" {
		fmt.Fprintf(w, "  waiting for approval %s: POST /v1/sessions/%s/interactions/%s\n", render.Clean(j.InteractionID), render.Clean(j.SessionID), render.Clean(j.InteractionID))
	}
	for _, a := range j.Attempts {
		line := fmt.Sprintf("  run %d attempt %d  %s  %s", a.Run, a.N, render.Clean(a.Outcome), render.Clean(a.Replica))
		if a.Error != "" {
			line += "  " + render.Clean(a.Error)
		}
		fmt.Fprintln(w, line)
	}
	if r := j.Result; r != nil {
		if r.OK {
			fmt.Fprintf(w, "  result ok  %s\n", render.Clean(r.Output))
		} else {
			fmt.Fprintf(w, "  result failed  %s\n", render.Clean(r.Error))
		}
	}
	for _, d := range j.Deliveries {
		fmt.Fprintf(w, "  webhook %s attempt %d  %d  ok=%v %s\n", d.Event, d.Attempt, d.Status, d.OK, render.Clean(d.Error))
	}
}
