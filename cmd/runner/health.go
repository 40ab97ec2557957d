package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/client"
	"github.com/agentrunner/runner/internal/render"
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
	if mode == "json" || !summarizeHealth(c.stdout, *url, body) {
		fmt.Fprint(c.stdout, string(body))
	}
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}

// summarizeHealth writes a /health body as a few lines for a person; false
// when the body is not one (it is then shown as it came).
func summarizeHealth(w io.Writer, url string, body []byte) bool {
	var h struct {
		Status    string                    `json:"status"`
		Runner    string                    `json:"runner"`
		Harnesses []string                  `json:"harnesses"`
		Installed map[string]map[string]any `json:"harnessesInstalled"`
		Providers map[string]map[string]any `json:"providers"`
		InFlight  int                       `json:"inFlight"`
		Warm      int                       `json:"warm"`
	}
	if json.Unmarshal(body, &h) != nil || h.Status == "" {
		return false
	}
	fmt.Fprintf(w, "runner %s at %s: %s\n", render.Clean(h.Runner), url, render.Clean(h.Status))
	var hs []string
	for _, name := range h.Harnesses {
		in, ok := h.Installed[name]
		switch {
		case !ok:
			hs = append(hs, render.Clean(name))
		case in["installed"] == true:
			hs = append(hs, render.Clean(name))
		default:
			hs = append(hs, render.Clean(name)+" (not installed: runner harness install "+render.Clean(name)+")")
		}
	}
	fmt.Fprintf(w, "  harnesses  %s\n", strings.Join(hs, ", "))
	names := slices.Sorted(maps.Keys(h.Providers))
	for _, name := range names {
		d := h.Providers[name]
		line := render.Clean(name)
		if iso, ok := d["isolation"].(string); ok {
			line += "  isolation " + render.Clean(iso)
		}
		if on, ok := d["network_on"].(string); ok {
			line += "  network on: " + render.Clean(on)
		}
		fmt.Fprintf(w, "  provider   %s\n", line)
	}
	fmt.Fprintf(w, "  turns      %d running, %d warm\n", h.InFlight, h.Warm)
	return true
}
