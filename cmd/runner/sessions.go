package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// sessions is `runner sessions [ID]`: the running service's sessions, or
// one session with its turns, as JSON (GET /v1/sessions[/ID]).
func sessions(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) int {
	cfg, ok := loadConfig(environ, stderr)
	if !ok && !wantsHelp(args) {
		return 2
	}
	fs := flag.NewFlagSet("runner sessions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "http://"+cfg.Addr(), "base URL of the runner")
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	if cfg.Token == "" {
		fmt.Fprintln(stderr, "runner sessions: set AGENTA_RUNNER_TOKEN to the service's token")
		return 2
	}
	path := "/v1/sessions"
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "runner sessions: at most one session id")
		return 2
	}
	if fs.NArg() == 1 {
		path += "/" + url.PathEscape(fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *base+path, nil)
	if err != nil {
		fmt.Fprintln(stderr, "runner sessions:", err)
		return 2
	}
	req.Header.Set("Authorization", "Bearer "+cfg.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "runner sessions: %v (is `runner serve` running at %s?)\n", err, *base)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	fmt.Fprint(stdout, string(body))
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
