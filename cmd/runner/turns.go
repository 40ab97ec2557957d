package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/agentrunner/runner/internal/client"
	"github.com/agentrunner/runner/internal/console"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
)

// localTurns runs console turns in-process with the service's engine.
type localTurns struct {
	svc *runner.Service
	// service is where a service on this data dir would listen, for the
	// refusal of a session it holds.
	service string
}

func (l localTurns) Run(ctx context.Context, req *wire.Request, sink func(seq int64, ev wire.Event)) wire.Result {
	res, err := l.svc.Run(ctx, req, sink)
	if errors.Is(err, errdefs.ErrConflict) && req.SessionID != "" {
		// Another process on this data dir (the service, most often)
		// holds the session's lease: say where the turn can run.
		res.Error = fmt.Sprintf("session %s is held by another runner on this data dir, most likely the service at %s (%v); drop -workdir so the turn runs on the service, or send it there with -url", req.SessionID, l.service, err)
	}
	return res
}

func (l localTurns) Decide(ctx context.Context, req *wire.Request, iid string, approved bool, sink func(seq int64, ev wire.Event)) wire.Result {
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

// serviceTurns runs console turns on a running `runner serve` over its
// HTTP API.
type serviceTurns struct{ c client.Client }

var (
	_ console.Turns = localTurns{}
	_ console.Turns = serviceTurns{}
)

func (s serviceTurns) Run(ctx context.Context, req *wire.Request, sink func(seq int64, ev wire.Event)) wire.Result {
	body, err := json.Marshal(req)
	if err != nil {
		return failedResult(req, err)
	}
	return s.stream(ctx, req, "/stream", body, sink)
}

func (s serviceTurns) Decide(ctx context.Context, req *wire.Request, iid string, approved bool, sink func(seq int64, ev wire.Event)) wire.Result {
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
	if resp, err := s.c.Do(ctx, http.MethodPost, "/kill", body); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// stream posts body and reads the NDJSON answer: events to sink, then the
// result. A refusal is a non-200 {ok:false,error} or a 200 stream whose
// only record is an ok:false result; both come back as the result.
func (s serviceTurns) stream(ctx context.Context, req *wire.Request, path string, body []byte, sink func(seq int64, ev wire.Event)) wire.Result {
	resp, err := s.c.Open(ctx, http.MethodPost, path, body)
	var se *client.StatusError
	if errors.As(err, &se) {
		var res wire.Result
		_ = json.Unmarshal(se.Body, &res)
		res.OK = false
		res.Error = se.Error()
		return res
	}
	if err != nil {
		return failedResult(req, err)
	}
	defer resp.Body.Close()
	sc := client.Lines(resp.Body)
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
func healthAt(ctx context.Context, base string) bool {
	return (&client.Client{Base: base}).Answers(ctx, "/health")
}

// serviceAt reports whether a runner service at base answers
// GET /v1/sessions with this token, quickly: `runner run -session` prefers
// a running service, which may hold the session warm.
func serviceAt(ctx context.Context, base, token string) bool {
	return (&client.Client{Base: base, Token: token}).Answers(ctx, "/v1/sessions?limit=1")
}
