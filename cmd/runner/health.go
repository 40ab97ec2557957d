package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// health is `runner health`: GET /health of a running service.
func health(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) int {
	cfg, ok := loadConfig(environ, stderr)
	if !ok && !wantsHelp(args) {
		return 2
	}
	fs := flag.NewFlagSet("runner health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+cfg.Addr(), "base URL of the runner")
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url+"/health", nil)
	if err != nil {
		fmt.Fprintln(stderr, "runner health:", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "runner health: %v (is `runner serve` running at %s?)\n", err, *url)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprint(stdout, string(body))
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
