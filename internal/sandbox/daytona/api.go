package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
)

// This is a small REST client of our own rather than the generated
// github.com/daytonaio/daytona/libs/api-client-go and toolbox-api-client-go
// (v0.190.0): we need about a dozen endpoints, those modules are frozen
// (the project moved to a closed codebase) and lack newer fields such as
// domainAllowList and secrets, and their generated error types hide the
// API's {statusCode, error, message} body that we must report verbatim.
// Owning the client also keeps the retry policy (which calls are safe to
// repeat) in one visible place and makes the fake easy to keep faithful.

// apiSandbox is the part of Daytona's Sandbox we use.
type apiSandbox struct {
	ID               string            `json:"id"`
	State            string            `json:"state"`
	DesiredState     string            `json:"desiredState,omitempty"`
	ErrorReason      string            `json:"errorReason,omitempty"`
	Labels           map[string]string `json:"labels"`
	Target           string            `json:"target,omitempty"`
	NetworkBlockAll  bool              `json:"networkBlockAll"`
	NetworkAllowList *string           `json:"networkAllowList,omitempty"`
	DomainAllowList  *string           `json:"domainAllowList,omitempty"`
	ToolboxProxyURL  string            `json:"toolboxProxyUrl"`
}

// createRequest is Daytona's CreateSandbox, the fields we set.
type createRequest struct {
	Snapshot           string            `json:"snapshot,omitempty"`
	BuildInfo          *buildInfo        `json:"buildInfo,omitempty"`
	Target             string            `json:"target,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	NetworkBlockAll    bool              `json:"networkBlockAll,omitempty"`
	NetworkAllowList   string            `json:"networkAllowList,omitempty"`
	DomainAllowList    string            `json:"domainAllowList,omitempty"`
	AutoStopInterval   int               `json:"autoStopInterval"`
	AutoDeleteInterval int               `json:"autoDeleteInterval"`
}

type buildInfo struct {
	DockerfileContent string   `json:"dockerfileContent"`
	ContextHashes     []string `json:"contextHashes"`
}

// networkSettings is the body of POST /sandbox/{id}/network-settings.
// Every field is sent, so that the update also clears what the new policy
// does not have.
type networkSettings struct {
	NetworkBlockAll  bool   `json:"networkBlockAll"`
	NetworkAllowList string `json:"networkAllowList"`
	DomainAllowList  string `json:"domainAllowList"`
}

// APIError is a refusal by the Daytona API or a sandbox's toolbox, with the
// API's own message.
type APIError struct {
	Op        string // "create sandbox", "start sandbox" …
	Status    int
	ErrorText string // the body's "error" ("Bad Request" …)
	Message   string // the body's "message"
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.ErrorText
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("daytona %s: %d: %s", e.Op, e.Status, msg)
}

func (e *APIError) class() error {
	switch e.Status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return errdefs.ErrInvalid
	case http.StatusUnauthorized, http.StatusForbidden:
		return errdefs.ErrUnauthorized
	case http.StatusNotFound:
		return errdefs.ErrNotFound
	case http.StatusConflict:
		return errdefs.ErrConflict
	case http.StatusTooManyRequests:
		return errdefs.ErrExhausted
	}
	return errdefs.ErrUnavailable
}

// retryable reports statuses that say "not now" rather than "no".
func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// api is the Daytona REST client: the main API and sandbox toolboxes.
type api struct {
	base     string // e.g. https://app.daytona.io/api
	key      string
	hc       *http.Client
	clock    Clock
	log      *slog.Logger
	attempts int
}

// call describes one request.
type call struct {
	op     string
	method string
	url    string // absolute
	body   any    // JSON-encoded unless it is a *multipartBody
	out    any    // decoded from JSON if non-nil
	// once marks a request that must not be repeated blindly after an
	// ambiguous failure (create); it is retried only on 429 and 503, which
	// mean the request was refused before it was acted on.
	once bool
}

type multipartBody struct {
	contentType string
	data        []byte
}

// do sends c, retrying with backoff on retryable statuses and transport
// errors. The error wraps an *APIError and an errdefs class.
func (a *api) do(ctx context.Context, c call) error {
	var payload []byte
	contentType := "application/json"
	switch b := c.body.(type) {
	case nil:
	case *multipartBody:
		payload, contentType = b.data, b.contentType
	default:
		var err error
		if payload, err = json.Marshal(b); err != nil {
			return fmt.Errorf("daytona %s: %w", c.op, err)
		}
	}
	var last error
	for attempt := range a.attempts {
		if attempt > 0 {
			d := backoff(attempt)
			a.log.Debug("daytona retry", logkey.Stage, c.op, logkey.Error, last, "attempt", attempt)
			if err := a.sleep(ctx, d); err != nil {
				return errors.Join(err, last)
			}
		}
		var rd io.Reader
		if payload != nil {
			rd = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, c.method, c.url, rd)
		if err != nil {
			return fmt.Errorf("daytona %s: %w", c.op, err)
		}
		req.Header.Set("Authorization", "Bearer "+a.key)
		// The toolbox picks its log response format by SDK version; naming
		// one keeps the answers JSON (docs/protocols.md, Daytona).
		req.Header.Set("X-Daytona-Source", "runner")
		req.Header.Set("X-Daytona-SDK-Version", sdkVersion)
		if payload != nil {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := a.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("daytona %s: %w", c.op, ctx.Err())
			}
			last = errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("daytona %s: %w", c.op, err))
			if c.once {
				return last
			}
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if err != nil {
			last = errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("daytona %s: read answer: %w", c.op, err))
			if c.once {
				return last
			}
			continue
		}
		if resp.StatusCode >= 300 {
			ae := &APIError{Op: c.op, Status: resp.StatusCode}
			var eb struct {
				Error   string          `json:"error"`
				Message json.RawMessage `json:"message"`
			}
			if json.Unmarshal(body, &eb) == nil {
				ae.ErrorText = eb.Error
				ae.Message = rawMessage(eb.Message)
			} else {
				ae.Message = strings.TrimSpace(string(body))
			}
			last = errdefs.With(ae.class(), ae)
			if !retryable(resp.StatusCode) || (c.once && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
				return last
			}
			continue
		}
		if c.out != nil && len(body) > 0 {
			if err := json.Unmarshal(body, c.out); err != nil {
				return fmt.Errorf("daytona %s: decode answer: %w", c.op, err)
			}
		}
		return nil
	}
	return last
}

// rawMessage renders the API's message, a string or (from validation) a
// list of strings.
func rawMessage(m json.RawMessage) string {
	var s string
	if json.Unmarshal(m, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(m, &list) == nil {
		return strings.Join(list, "; ")
	}
	return string(m)
}

func backoff(attempt int) time.Duration {
	d := 200 * time.Millisecond << min(attempt-1, 5)
	return min(d, 5*time.Second)
}

func (a *api) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-a.clock.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *api) url(format string, args ...any) string {
	parts := make([]any, len(args))
	for i, v := range args {
		parts[i] = url.PathEscape(fmt.Sprint(v))
	}
	return a.base + fmt.Sprintf(format, parts...)
}

func (a *api) create(ctx context.Context, req createRequest) (*apiSandbox, error) {
	var sb apiSandbox
	err := a.do(ctx, call{op: "create sandbox", method: http.MethodPost, url: a.url("/sandbox"), body: req, out: &sb, once: true})
	return &sb, err
}

// findByLabel returns the sandboxes carrying label k=v, following the
// list's cursor: a reaper that saw only the first page would leak the rest.
func (a *api) findByLabel(ctx context.Context, k, v string) ([]apiSandbox, error) {
	labels, _ := json.Marshal(map[string]string{k: v})
	var all []apiSandbox
	cursor := ""
	for range 1000 { // 200k sandboxes; a cursor that never ends is a bug
		var page struct {
			Items      []apiSandbox `json:"items"`
			NextCursor *string      `json:"nextCursor"`
		}
		q := url.Values{"labels": {string(labels)}, "limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if err := a.do(ctx, call{op: "list sandboxes", method: http.MethodGet, url: a.url("/sandbox") + "?" + q.Encode(), out: &page}); err != nil {
			return all, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil || *page.NextCursor == "" || *page.NextCursor == cursor {
			return all, nil
		}
		cursor = *page.NextCursor
	}
	return all, fmt.Errorf("daytona list sandboxes: more than 1000 pages")
}

func (a *api) get(ctx context.Context, id string) (*apiSandbox, error) {
	var sb apiSandbox
	err := a.do(ctx, call{op: "get sandbox " + id, method: http.MethodGet, url: a.url("/sandbox/%s", id), out: &sb})
	return &sb, err
}

func (a *api) action(ctx context.Context, id, action string) (*apiSandbox, error) {
	var sb apiSandbox
	err := a.do(ctx, call{op: action + " sandbox " + id, method: http.MethodPost, url: a.url("/sandbox/%s/"+action, id), out: &sb})
	return &sb, err
}

func (a *api) remove(ctx context.Context, id string) error {
	return a.do(ctx, call{op: "delete sandbox " + id, method: http.MethodDelete, url: a.url("/sandbox/%s", id)})
}

func (a *api) setNetwork(ctx context.Context, id string, ns networkSettings) error {
	return a.do(ctx, call{op: "update network settings of " + id, method: http.MethodPost, url: a.url("/sandbox/%s/network-settings", id), body: ns})
}

// previewURL returns a signed URL of the sandbox's port: the token is in
// the URL, so requests need no Daytona header.
func (a *api) previewURL(ctx context.Context, id string, port int, expires time.Duration) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	u := a.url("/sandbox/%s/ports/%s/signed-preview-url", id, port) + "?expiresInSeconds=" + strconv.Itoa(int(expires/time.Second))
	if err := a.do(ctx, call{op: "get preview url of " + id, method: http.MethodGet, url: u, out: &out}); err != nil {
		return "", err
	}
	if out.URL == "" {
		return "", fmt.Errorf("daytona get preview url of %s: the answer has no url", id)
	}
	return out.URL, nil
}

// toolbox is one sandbox's toolbox API.
type toolbox struct {
	a    *api
	id   string
	base string // toolboxProxyUrl + "/" + id
}

func (a *api) toolbox(sb *apiSandbox) *toolbox {
	return &toolbox{a: a, id: sb.ID, base: strings.TrimSuffix(sb.ToolboxProxyURL, "/") + "/" + url.PathEscape(sb.ID)}
}

func (t *toolbox) url(path string, q url.Values) string {
	if len(q) > 0 {
		return t.base + path + "?" + q.Encode()
	}
	return t.base + path
}

func (t *toolbox) homeDir(ctx context.Context) (string, error) {
	var out struct {
		Dir string `json:"dir"`
	}
	err := t.a.do(ctx, call{op: "get home dir of " + t.id, method: http.MethodGet, url: t.url("/user-home-dir", nil), out: &out})
	if err == nil && out.Dir == "" {
		err = fmt.Errorf("daytona get home dir of %s: empty answer", t.id)
	}
	return out.Dir, err
}

// upload writes data at path (parents created by the toolbox).
func (t *toolbox) upload(ctx context.Context, path string, data []byte) error {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", path[strings.LastIndex(path, "/")+1:])
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	return t.a.do(ctx, call{
		op: "upload " + path + " to " + t.id, method: http.MethodPost,
		url:  t.url("/files/upload", url.Values{"path": {path}}),
		body: &multipartBody{contentType: mw.FormDataContentType(), data: buf.Bytes()},
	})
}

// executeResult is the toolbox's ExecuteResponse.
type executeResult struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// execute runs command synchronously. The toolbox splits command into
// words itself (double and single quotes group) and runs no shell.
func (t *toolbox) execute(ctx context.Context, command string, timeout time.Duration) (*executeResult, error) {
	var res executeResult
	err := t.a.do(ctx, call{op: "execute in " + t.id, method: http.MethodPost,
		url:  t.url("/process/execute", nil),
		body: map[string]any{"command": command, "timeout": int(timeout / time.Second)}, out: &res, once: true})
	return &res, err
}
