package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentrunner/runner/internal/client"
	"github.com/agentrunner/runner/internal/console"
)

// healthCommand is `runner health`: GET /health of a running service.
type healthCommand struct{ stdio }

func (c healthCommand) run(ctx context.Context, args []string) int {
	cfg, ok := loadConfig(c.environ, c.stderr)
	if !ok && !wantsHelp(args) {
		return 2
	}
	fs := flag.NewFlagSet("runner health", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	url := fs.String("url", "http://"+cfg.Addr(), "base URL of the runner")
	output := fs.String("o", "", "output: text (a summary; the default on a terminal) or json (the /health body; the default otherwise)")
	if code, ok := parseFlags(fs, args, c.stdout); !ok {
		return code
	}
	mode := *output
	switch {
	case mode == "" && isTerminal(c.stdout):
		mode = "text"
	case mode == "":
		mode = "json"
	case mode != "text" && mode != "json":
		fmt.Fprintf(c.stderr, "runner health: -o %q: use text or json\n", mode)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hc := client.Client{Base: *url}
	req, err := hc.NewRequest(ctx, http.MethodGet, "/health", nil)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner health:", err)
		return 2
	}
	resp, err := hc.Send(req)
	if err != nil {
		fmt.Fprintln(c.stderr, "runner health:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if mode == "json" || !console.SummarizeHealth(c.stdout, *url, body) {
		fmt.Fprint(c.stdout, string(body))
	}
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
