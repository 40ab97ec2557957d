// Package client calls a running runner service (`runner serve`) over its
// HTTP API, as the CLI does: `runner run -url`, `runner sessions`,
// `runner health`. It knows the API's conventions (the bearer token,
// NDJSON answers, {"error": …} refusals) and nothing of the turn: callers
// read the answers as wire records.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client is one service's base URL and token. The zero HTTP uses
// http.DefaultClient.
type Client struct {
	// Base is the service's base URL, e.g. http://127.0.0.1:8765.
	Base string
	// Token is the service's bearer token; empty sends none.
	Token string
	HTTP  *http.Client
}

// maxErrorBody bounds what is read of a refusal's body.
const maxErrorBody = 1 << 20

// maxBody bounds what Get reads of an answer.
const maxBody = 16 << 20

// StatusError is an answer other than 200 OK.
type StatusError struct {
	// Status is the HTTP status line ("409 Conflict").
	Status string
	// Message is the body's "error" field, else the body itself.
	Message string
	// Body is the answer's body (at most 1 MiB).
	Body []byte
}

func (e *StatusError) Error() string { return e.Status + ": " + e.Message }

// Do sends a request to path (with its query) and returns the answer
// whatever its status. body, if not nil, is sent as JSON. A service that
// does not answer is an error saying where it was looked for.
func (c *Client) Do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	hr, err := c.NewRequest(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	return c.Send(hr)
}

// NewRequest is the request Do sends: the token, and JSON in, NDJSON out.
func (c *Client) NewRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, c.Base+path, r)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	hr.Header.Set("Accept", "application/x-ndjson")
	return hr, nil
}

// Send sends hr; a service that does not answer is an error saying where
// it was looked for.
func (c *Client) Send(hr *http.Request) (*http.Response, error) {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("%w (is `runner serve` running at %s?)", err, c.Base)
	}
	return resp, nil
}

// Open is Do for an answer that must be 200 OK: any other is a
// *StatusError, its body read and closed. The caller closes the body of
// the answer it gets.
func (c *Client) Open(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	resp, err := c.Do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, &StatusError{Status: resp.Status, Message: ErrorMessage(b), Body: b}
	}
	return resp, nil
}

// ErrorMessage is the error a refusal's body carries: its "error" field,
// else the body itself.
func ErrorMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		return strings.TrimSpace(string(body))
	}
	return e.Error
}

// Get reads the whole 200 OK answer to GET path (at most 16 MiB).
func (c *Client) Get(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.Open(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxBody))
}

// answerWait bounds Answers. Where nothing listens (the CLI asks its own
// loopback address) the dial is refused at once, so the bound only
// matters for a service that is there but busy: half a second was too
// little on a loaded machine, and a busy service taken for none sent the
// turn in-process, where the service's lease on the session refused it.
const answerWait = 5 * time.Second

// Answers reports whether GET path answers 200 OK within answerWait:
// whether a service is there (and takes the token) before a turn is sent
// to it.
func (c *Client) Answers(ctx context.Context, path string) bool {
	ctx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	resp, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Lines is a scanner of an NDJSON answer, one record a line, with room
// for the largest record the service sends (64 MiB).
func Lines(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	return sc
}
