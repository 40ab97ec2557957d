package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// Config configures a Client.
type Config struct {
	// BaseURL is where the daemon's API is reached, e.g. a provider's
	// preview URL; no trailing slash needed.
	BaseURL string
	Token   string
	// HTTPClient must not have a Timeout: streams stay open for hours. It
	// should carry a cookie jar when a proxy hands out session cookies.
	HTTPClient *http.Client
	// Refresh, if set, returns a new BaseURL; it is called once when a
	// proxy (not the daemon) refuses a request with 401, 403 or 404, as it
	// does when a signed URL expired.
	Refresh func(ctx context.Context) (string, error)
	// Sleep waits between retries; default a timer. Tests inject one that
	// returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
	// Attempts bounds the retries of one call across transport errors and
	// 429/502/503/504 from a proxy; default 30 (about a minute of backoff).
	Attempts int
	// Gone, if set, asks the provider whether the sandbox still exists. It
	// is consulted when requests start failing (at most once a second) and
	// returns an error wrapping sandbox.ErrGone when the sandbox is gone;
	// the failing call then ends with that error at once, instead of
	// retrying a dead sandbox for a minute. Other errors are ignored.
	Gone func(ctx context.Context) error
	// AckEvery is how much output a reader consumes between acknowledgements;
	// it must stay well below the daemon's MaxBuffer or the daemon stalls the
	// process waiting for one. Default 1 MiB (the daemon's default buffer is 8).
	AckEvery int
}

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	cfg Config

	// mu guards the following.
	mu      sync.Mutex
	base    string
	goneAt  time.Time // when Gone was last asked; zero before
	goneErr error     // what it said then, if the sandbox is gone
	// lost ends once goneErr is set: requests that no heartbeat covers
	// (a long poll) end then rather than hang.
	lost     context.Context
	markLost context.CancelFunc
}

// goneEvery bounds how often a failing client asks the provider whether
// the sandbox is gone.
const goneEvery = time.Second

// gone returns the error of cfg.Gone when it says the sandbox is gone,
// asking at most once per goneEvery; a gone sandbox stays gone.
func (c *Client) gone(ctx context.Context) error {
	if c.cfg.Gone == nil {
		return nil
	}
	c.mu.Lock()
	if c.goneErr != nil || time.Since(c.goneAt) < goneEvery {
		err := c.goneErr
		c.mu.Unlock()
		return err
	}
	c.goneAt = time.Now()
	c.mu.Unlock()
	err := c.cfg.Gone(ctx)
	if !errors.Is(err, sandbox.ErrGone) {
		return nil
	}
	c.mu.Lock()
	if c.goneErr == nil {
		c.goneErr = err
		c.markLost()
	}
	c.mu.Unlock()
	return err
}

// New returns a client for the daemon described by cfg.
func New(cfg Config) *Client {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 30
	}
	if cfg.AckEvery <= 0 {
		cfg.AckEvery = 1 << 20
	}
	c := &Client{cfg: cfg, base: strings.TrimSuffix(cfg.BaseURL, "/")}
	c.lost, c.markLost = context.WithCancel(context.Background())
	return c
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StatusError is a refusal by the daemon (or, with FromProxy, by a proxy
// in front of it).
type StatusError struct {
	Status    int
	Message   string
	FromProxy bool
}

func (e *StatusError) Error() string {
	who := "sandboxd"
	if e.FromProxy {
		who = "sandboxd proxy"
	}
	return fmt.Sprintf("%s: %d %s: %s", who, e.Status, http.StatusText(e.Status), e.Message)
}

func classify(e *StatusError) error {
	var class error
	switch e.Status {
	case http.StatusBadRequest:
		class = errdefs.ErrInvalid
	case http.StatusUnauthorized, http.StatusForbidden:
		class = errdefs.ErrUnauthorized
	case http.StatusNotFound, http.StatusGone:
		class = errdefs.ErrNotFound
	case http.StatusConflict:
		class = errdefs.ErrConflict
	case http.StatusTooManyRequests:
		class = errdefs.ErrExhausted
	default:
		if e.Status >= 500 {
			class = errdefs.ErrUnavailable
		}
	}
	if class == nil {
		return e
	}
	return errdefs.With(class, e)
}

// do sends a request and returns a 2xx response, retrying what is safe
// to retry: transport errors and 429/502/503/504 from a proxy. Every
// request the client makes is idempotent (starts carry an id, inputs an
// offset), which is what makes that retrying safe.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte) (*http.Response, error) {
	refreshed := false
	var last error
	for attempt := range c.cfg.Attempts {
		if attempt > 0 {
			if err := c.gone(ctx); err != nil {
				return nil, fmt.Errorf("sandboxd %s %s: %w", method, path, errors.Join(err, last))
			}
			if err := c.cfg.Sleep(ctx, backoff(attempt)); err != nil {
				return nil, errors.Join(err, last)
			}
		}
		c.mu.Lock()
		u := c.base + path
		c.mu.Unlock()
		if len(query) > 0 {
			u += "?" + query.Encode()
		}
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, u, rd)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-Sandboxd-Token", c.cfg.Token)
		resp, err := c.cfg.HTTPClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				// With the earlier attempts' reason, as a cancelled sleep
				// between them keeps it: a deadline cutting a wait short
				// should still say what was failing.
				return nil, errors.Join(ctx.Err(), last)
			}
			last = errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("sandboxd %s %s: %w", method, path, err))
			continue
		}
		if resp.StatusCode < 300 {
			return resp, nil
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		se := &StatusError{Status: resp.StatusCode, Message: errorMessage(msg), FromProxy: resp.Header.Get(sandboxd.VersionHeader) == ""}
		last = fmt.Errorf("%s %s: %w", method, path, classify(se))
		switch {
		case se.FromProxy && !refreshed && c.cfg.Refresh != nil &&
			(se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden || se.Status == http.StatusNotFound):
			refreshed = true
			base, err := c.cfg.Refresh(ctx)
			if err != nil {
				if gerr := c.gone(ctx); gerr != nil {
					err = gerr
				}
				return nil, errors.Join(last, err)
			}
			c.mu.Lock()
			c.base = strings.TrimSuffix(base, "/")
			c.mu.Unlock()
		case se.Status == http.StatusTooManyRequests,
			se.FromProxy && (se.Status == http.StatusBadGateway || se.Status == http.StatusServiceUnavailable || se.Status == http.StatusGatewayTimeout):
		default:
			return nil, last
		}
	}
	return nil, last
}

func errorMessage(b []byte) string {
	var v struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &v) == nil {
		if v.Message != "" {
			return v.Message
		}
		if v.Error != "" {
			return v.Error
		}
	}
	return strings.TrimSpace(string(b))
}

func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt-1, 6)
	return min(d, 2*time.Second)
}

func (c *Client) getJSON(ctx context.Context, path string, query url.Values, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("sandboxd GET %s: decode: %w", path, err)
	}
	return nil
}

// Health returns the daemon's health.
func (c *Client) Health(ctx context.Context) (sandboxd.Health, error) {
	var h sandboxd.Health
	err := c.getJSON(ctx, "/v1/health", nil, &h)
	return h, err
}

// ReadFile returns the contents of rel beneath root in the sandbox; a
// link on the way is refused, never followed.
func (c *Client) ReadFile(ctx context.Context, root, rel string) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/files", url.Values{"root": {root}, "path": {rel}}, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// WriteFile writes data at rel beneath root in the sandbox with mode,
// creating parents; a link at rel is replaced, one among its parents
// refuses the write.
func (c *Client) WriteFile(ctx context.Context, root, rel string, data []byte, mode uint32) error {
	if data == nil {
		data = []byte{}
	}
	q := url.Values{"root": {root}, "path": {rel}, "mode": {strconv.FormatUint(uint64(mode&0o7777), 8)}}
	resp, err := c.do(ctx, http.MethodPut, "/v1/files", q, data)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Start starts a process. Cancelling ctx kills it (also after Start
// returned, like exec.CommandContext); waitDelay bounds how long Wait
// waits for the reader of Stdout after the process exited (0: 5s).
func (c *Client) Start(ctx context.Context, req sandboxd.StartRequest, waitDelay time.Duration) (*Process, error) {
	if req.ID == "" {
		req.ID = sandboxd.NewID()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/processes", nil, body)
	if err != nil {
		return nil, err
	}
	var sr sandboxd.StartResponse
	err = json.NewDecoder(resp.Body).Decode(&sr)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("sandboxd start: decode: %w", err)
	}
	p := newProcess(c, sr.ID, waitDelay)
	p.stopWatch = context.AfterFunc(ctx, func() { _ = p.Kill() })
	return p, nil
}

// Accept waits for an in-sandbox process to Dial a channel named name and
// returns it as a Process whose Stdin writes to and whose Stdout reads from
// that connection; Kill closes it. Cancelling ctx stops the wait only.
func (c *Client) Accept(ctx context.Context, name string) (*Process, error) {
	q := url.Values{"name": {name}, "claim": {sandboxd.NewID()}}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := c.cfg.Sleep(ctx, backoff(attempt)); err != nil {
				return nil, err
			}
		}
		if attempt >= c.cfg.Attempts {
			return nil, errdefs.With(errdefs.ErrUnavailable, errors.New("sandboxd accept: the stream kept breaking"))
		}
		resp, err := c.do(ctx, http.MethodGet, "/v1/channels/accept", q, nil)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(resp.Body)
		for {
			var v struct {
				ID string `json:"id"`
			}
			if err := dec.Decode(&v); err != nil {
				break // dropped: ask again with the same claim
			}
			if v.ID != "" {
				resp.Body.Close()
				return newProcess(c, v.ID, 0), nil
			}
			attempt = 0 // a heartbeat: the connection works
		}
		resp.Body.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}
