package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentrunner/runner/internal/logkey"
)

// steering follows a cut result, so the model narrows its next call
// instead of retrying blind (docs/contract.md, Tools).
const steering = "This result was too large to return in full. Narrow your query (add filters, a smaller " +
	"date range, or specific fields), request a summary, or paginate and fetch fewer items " +
	"per call, then try again."

// call executes one tool call and returns the text for the model. It
// fills rec's outcome and status; an error's text is model-facing.
func (s *Set) call(ctx context.Context, rec *CallRecord, raw json.RawMessage) (string, error) {
	e := s.specs[rec.Tool]
	args, err := objectArgs(raw)
	if err != nil {
		rec.Outcome = OutcomeInvalid
		return "", fmt.Errorf("tool %s: %w", rec.Tool, err)
	}
	rec.Args = args
	if missing := missingArgs(e.required, args); len(missing) > 0 {
		rec.Outcome = OutcomeInvalid
		return "", fmt.Errorf("tool %s: missing required argument(s): %s", rec.Tool, strings.Join(missing, ", "))
	}
	// Check sees the model's arguments; bindings are filled after the
	// verdict, so they never reach approval keys or cards (docs/contract.md, Tools).
	if s.cfg.Check != nil {
		if err := s.cfg.Check(ctx, rec.Call); err != nil {
			rec.Outcome = OutcomeRefused
			return "", err
		}
	}
	if e.spec.Kind == "client" {
		if s.cfg.Client == nil {
			rec.Outcome = OutcomeRefused
			return "", fmt.Errorf("tool %s is fulfilled by the user's browser, which this run cannot reach", rec.Tool)
		}
		return s.cfg.Client(ctx, rec.Call)
	}
	timeout := s.cfg.DefaultTimeout
	if e.spec.TimeoutMS > 0 {
		timeout = time.Duration(e.spec.TimeoutMS)*time.Millisecond + s.cfg.TimeoutGrace
	}
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()

	req, err := s.request(cctx, e, rec.ID, args)
	if err != nil {
		rec.Outcome = OutcomeInvalid
		return "", fmt.Errorf("tool %s: %w", rec.Tool, err)
	}
	if s.auth != "" {
		req.Header.Set("Authorization", s.auth)
	}
	if s.cfg.RunKind != "" {
		req.Header.Set("X-Agenta-Run-Kind", s.cfg.RunKind)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return "", s.transportError(cctx, rec, timeout, err)
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	data, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes+1))
	if err != nil {
		return "", s.transportError(cctx, rec, timeout, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The upstream body stays in the log: it may hold internals the
		// model has no business reading.
		s.log.LogAttrs(ctx, slog.LevelWarn, "tool callback failed",
			slog.String(keyTool, rec.Tool), slog.Int(keyStatus, resp.StatusCode),
			slog.String(logkey.Reason, string(truncate(data, 500))))
		rec.Outcome = OutcomeError
		return "", fmt.Errorf("tool %s failed: HTTP %d", rec.Tool, resp.StatusCode)
	}
	if int64(len(data)) > s.cfg.MaxResponseBytes {
		rec.Outcome = OutcomeError
		return "", fmt.Errorf("tool %s failed: response larger than %d bytes", rec.Tool, s.cfg.MaxResponseBytes)
	}
	text := string(data) // a direct call's answer goes to the model as is
	if e.direct == nil {
		if text, err = parseResult(data); err != nil {
			rec.Outcome = OutcomeError
			text, _ = s.cap(fmt.Sprintf("tool %s failed: %v", rec.Tool, err))
			return "", errors.New(text)
		}
	}
	text, rec.Truncated = s.cap(text)
	return text, nil
}

// request builds the HTTP request of a call: ephemeral arguments dropped,
// context bindings filled, then either the /tools/call envelope or the
// spec's direct call.
func (s *Set) request(ctx context.Context, e *entry, id string, raw json.RawMessage) (*http.Request, error) {
	args, err := decodeObject(raw)
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	// Ephemeral arguments are for the approval card, not the tool.
	for _, k := range e.spec.EphemeralArgs {
		delete(args, k)
	}
	if err := s.bind(args, e.bindings, "tool"); err != nil {
		return nil, err
	}
	method, target := http.MethodPost, s.endpoint
	var body []byte
	if e.direct != nil {
		method = e.direct.Method
		if target, body, err = s.directRequest(e.direct, args); err != nil {
			return nil, fmt.Errorf("direct call: %w", err)
		}
	} else {
		name := e.spec.CallRef
		if name == "" {
			name = e.spec.Name
		}
		if body, err = envelope(name, id, args); err != nil {
			return nil, err
		}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	return req, nil
}

var errCallTimeout = errors.New("tool call timed out")

func (s *Set) transportError(ctx context.Context, rec *CallRecord, timeout time.Duration, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), errCallTimeout):
		rec.Outcome = OutcomeTimeout
		return fmt.Errorf("tool %s failed: no answer within %s", rec.Tool, timeout)
	case errors.Is(context.Cause(ctx), errSetClosed):
		rec.Outcome = OutcomeCancelled
		return fmt.Errorf("tool %s: call cancelled: %w", rec.Tool, errSetClosed)
	case ctx.Err() != nil:
		rec.Outcome = OutcomeCancelled
		return fmt.Errorf("tool %s: call cancelled", rec.Tool)
	}
	rec.Outcome = OutcomeError
	return fmt.Errorf("tool %s failed: %w", rec.Tool, err)
}

// missingArgs lists the required top-level arguments args lacks. The
// full schema is the gateway's to enforce; this catches the common slip
// early, with a message the model can act on (docs/contract.md, Tools).
func missingArgs(required []string, args json.RawMessage) []string {
	if len(required) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return nil
	}
	var missing []string
	for _, r := range required {
		if _, ok := m[r]; !ok {
			missing = append(missing, r)
		}
	}
	return missing
}

// objectArgs returns the arguments as a JSON object; absent or null
// arguments are {}.
func objectArgs(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage(`{}`), nil
	}
	if raw[0] != '{' || !json.Valid(raw) {
		return nil, errors.New("arguments must be a JSON object")
	}
	return raw, nil
}

// envelope builds the /tools/call body (docs/contract.md, Tools).
func envelope(name, id string, args map[string]any) ([]byte, error) {
	type function struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	}
	type data struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	return json.Marshal(struct {
		Data data `json:"data"`
	}{data{ID: id, Type: "function", Function: function{Name: name, Arguments: args}}})
}

// parseResult reads a /tools/call response: {"call": {"data": {"content"},
// "status": {"code", "message"}}}. content is usually already a JSON
// string and is handed over as is. A status code of STATUS_CODE_ERROR is
// a failure the model should see as one, with its detail.
func parseResult(data []byte) (string, error) {
	var env struct {
		Call *struct {
			Data *struct {
				Content json.RawMessage `json:"content"`
			} `json:"data"`
			Status *struct {
				Code    string          `json:"code"`
				Message json.RawMessage `json:"message"`
			} `json:"status"`
		} `json:"call"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return "", errors.New("callback returned invalid JSON")
	}
	var detail string
	if env.Call != nil && env.Call.Data != nil {
		c := bytes.TrimSpace(env.Call.Data.Content)
		if len(c) > 0 && string(c) != "null" {
			if err := json.Unmarshal(c, &detail); err != nil {
				detail = string(c)
			}
		}
	}
	if env.Call != nil && env.Call.Status != nil && env.Call.Status.Code == "STATUS_CODE_ERROR" {
		reason := "the tool reported an error"
		var msg string
		if json.Unmarshal(env.Call.Status.Message, &msg) == nil && msg != "" {
			reason = msg
		}
		if detail != "" {
			reason += "\n" + detail
		}
		return "", errors.New(reason)
	}
	if env.Call == nil || env.Call.Data == nil || detail == "" && len(env.Call.Data.Content) == 0 {
		return string(data), nil
	}
	return detail, nil
}

// cap cuts text to MaxResultBytes, marker and steering included, at a
// UTF-8 boundary.
func (s *Set) cap(text string) (string, bool) {
	limit := s.cfg.MaxResultBytes
	if len(text) <= limit {
		return text, false
	}
	suffix := func(omitted int) string {
		return " [... " + strconv.Itoa(omitted) + " bytes omitted]\n\n" + steering
	}
	keep := max(0, limit-len(suffix(len(text))))
	for keep > 0 && !utf8.RuneStart(text[keep]) {
		keep--
	}
	return text[:keep] + suffix(len(text)-keep), true
}

func truncate(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return b[:n]
}
