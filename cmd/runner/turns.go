package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
)

// turns runs `runner run`'s turns, in this process or on a running
// service, with the same events either way.
type turns interface {
	// Run runs req, sending its events to sink as they happen.
	Run(ctx context.Context, req *wire.Request, sink runner.Sink) wire.Result
	// Decide answers a paused turn's interaction and runs the rest of it:
	// the same parked harness process when it is still warm.
	Decide(ctx context.Context, req *wire.Request, interactionID string, approved bool, sink runner.Sink) wire.Result
	// Cancel stops req's session turn (a session's turn outlives its
	// caller; a sessionless one stops with its context).
	Cancel(ctx context.Context, req *wire.Request)
}

// localTurns runs turns in-process with the service's engine.
type localTurns struct {
	svc *runner.Service
	// service is where a service on this data dir would listen, for the
	// refusal of a session it holds.
	service string
}

func (l localTurns) Run(ctx context.Context, req *wire.Request, sink runner.Sink) wire.Result {
	res, err := l.svc.Run(ctx, req, sink)
	if errors.Is(err, errdefs.ErrConflict) && req.SessionID != "" {
		// Another process on this data dir (the service, most often)
		// holds the session's lease: say where the turn can run.
		res.Error = fmt.Sprintf("session %s is held by another runner on this data dir, most likely the service at %s (%v); drop -workdir so the turn runs on the service, or send it there with -url", req.SessionID, l.service, err)
	}
	return res
}

func (l localTurns) Decide(ctx context.Context, req *wire.Request, iid string, approved bool, sink runner.Sink) wire.Result {
	t, err := l.svc.Decide(ctx, runner.KeyOf(req), iid, approved)
	if err != nil {
		return failedResult(req, err)
	}
	res, _ := t.Run(ctx, sink)
	return res
}

func (l localTurns) Cancel(ctx context.Context, req *wire.Request) {
	if req.SessionID != "" {
		l.svc.Kill(ctx, req.SessionID, req.ProjectID)
	}
}

// serviceTurns runs turns on a running `runner serve` over its HTTP API.
type serviceTurns struct {
	base, token string
	client      *http.Client
}

func (s serviceTurns) Run(ctx context.Context, req *wire.Request, sink runner.Sink) wire.Result {
	body, err := json.Marshal(req)
	if err != nil {
		return failedResult(req, err)
	}
	return s.stream(ctx, req, "/stream", body, sink)
}

func (s serviceTurns) Decide(ctx context.Context, req *wire.Request, iid string, approved bool, sink runner.Sink) wire.Result {
	body, _ := json.Marshal(map[string]bool{"approved": approved})
	path := "/v1/sessions/" + url.PathEscape(req.SessionID) + "/interactions/" + url.PathEscape(iid)
	if k := runner.KeyOf(req); k.ProjectID != "" {
		path += "?projectId=" + url.QueryEscape(k.ProjectID)
	}
	return s.stream(ctx, req, path, body, sink)
}

func (s serviceTurns) Cancel(ctx context.Context, req *wire.Request) {
	if req.SessionID == "" {
		return
	}
	body, _ := json.Marshal(map[string]string{"sessionId": req.SessionID, "projectId": req.ProjectID})
	hr, err := s.request(ctx, "/kill", body)
	if err != nil {
		return
	}
	if resp, err := s.client.Do(hr); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (s serviceTurns) request(ctx context.Context, path string, body []byte) (*http.Request, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Authorization", "Bearer "+s.token)
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/x-ndjson")
	return hr, nil
}

// stream posts body and reads the NDJSON answer: events to sink, then the
// result. A refusal is a non-200 {ok:false,error} or a 200 stream whose
// only record is an ok:false result; both come back as the result.
func (s serviceTurns) stream(ctx context.Context, req *wire.Request, path string, body []byte, sink runner.Sink) wire.Result {
	hr, err := s.request(ctx, path, body)
	if err != nil {
		return failedResult(req, err)
	}
	resp, err := s.client.Do(hr)
	if err != nil {
		return failedResult(req, fmt.Errorf("%w (is `runner serve` running at %s?)", err, s.base))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var res wire.Result
		if json.Unmarshal(b, &res) != nil || res.Error == "" {
			res.Error = strings.TrimSpace(string(b))
		}
		res.OK = false
		res.Error = fmt.Sprintf("%s: %s", resp.Status, res.Error)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return failedResult(req, fmt.Errorf("the service sent a bad NDJSON line: %w", err))
		}
		switch {
		case rec.Kind == wire.RecordResult && rec.Result != nil:
			return *rec.Result
		case rec.Kind == wire.RecordEvent && rec.Event != nil:
			sink(rec.Seq, *rec.Event)
		}
	}
	err = sc.Err()
	if err == nil {
		err = errors.New("the stream ended without a result")
	}
	return failedResult(req, fmt.Errorf("read the service's stream: %w", err))
}

func failedResult(req *wire.Request, err error) wire.Result {
	return wire.Result{SessionID: req.SessionID, Messages: []wire.OutMessage{}, Events: []wire.Event{}, Error: err.Error()}
}

// healthAt reports whether a runner answers /health at base.
func healthAt(ctx context.Context, base string) bool { return answers(ctx, base+"/health", "") }

// serviceAt reports whether a runner service at base answers
// GET /v1/sessions with this token, quickly: `runner run -session` prefers
// a running service, which may hold the session warm.
func serviceAt(ctx context.Context, base, token string) bool {
	return answers(ctx, base+"/v1/sessions?limit=1", token)
}

// answers reports whether a GET of url (with the bearer token, if any)
// answers 200 within half a second.
func answers(ctx context.Context, url, token string) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
