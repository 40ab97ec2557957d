package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/wire"
)

func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			WriteErr(w, errdefs.Invalidf("limit: %q, want 1 to 1000", v))
			return
		}
		limit = n
	}
	project, err := listScope(r)
	if err != nil {
		WriteErr(w, err)
		return
	}
	list, err := h.runner.ListSessions(r.Context(), project, limit)
	if err != nil {
		WriteErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"sessions": list})
}

func (h *Handler) getSession(w http.ResponseWriter, r *http.Request) {
	k, err := h.sessionKey(r)
	if err != nil {
		WriteErr(w, err)
		return
	}
	v, err := h.runner.GetSession(r.Context(), k)
	if err != nil {
		WriteErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, v)
}

func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request) {
	k, err := h.sessionKey(r)
	if err != nil {
		WriteErr(w, err)
		return
	}
	// The holder closes its warm harness; a holder that is gone was taken
	// over, and the session is deleted here.
	if h.routed(w, r, nil, k) {
		return
	}
	if err := h.runner.DeleteSession(r.Context(), k); err != nil {
		WriteErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// sessionEvents streams the session's log as NDJSON from ?after=<seq>;
// with ?follow=1 it stays open for live events, with pings while silent.
func (h *Handler) sessionEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after int64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			WriteErr(w, errdefs.Invalidf("after: %q, want a sequence number", v))
			return
		}
		after = n
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	k, err := h.sessionKey(r)
	if err != nil {
		WriteErr(w, err)
		return
	}
	// Check the session before committing to a 200 stream.
	if _, err := h.runner.GetSession(r.Context(), k); err != nil {
		WriteErr(w, err)
		return
	}
	// Live events are published by the replica running the turns.
	if follow && h.routed(w, r, nil, k) {
		return
	}
	out := startNDJSON(w)
	stopPings := func() {}
	if follow {
		stopPings = out.ping(h.cfg.PingInterval)
	}
	err = h.runner.Events(r.Context(), k, after, follow, func(rec wire.Record) error {
		out.write(rec)
		return out.failed()
	})
	stopPings()
	if err != nil && r.Context().Err() == nil {
		out.write(wire.Record{Kind: "error", Event: &wire.Event{Type: wire.EventError, Message: err.Error()}})
	}
}

// decide answers a paused approval and continues the turn, streaming it
// like /stream (NDJSON with Accept: application/x-ndjson).
func (h *Handler) decide(w http.ResponseWriter, r *http.Request) {
	if h.inflight.Add(1) > int64(h.cfg.ConcurrencyLimit) {
		h.inflight.Add(-1)
		WriteError(w, http.StatusTooManyRequests, "Runner at capacity ("+strconv.Itoa(h.cfg.ConcurrencyLimit)+" concurrent runs)")
		return
	}
	defer h.inflight.Add(-1)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	if err != nil {
		WriteErr(w, bodyError(err))
		return
	}
	var d struct {
		Approved *bool `json:"approved"`
	}
	if err := json.Unmarshal(body, &d); err != nil || d.Approved == nil {
		WriteErr(w, errdefs.Invalidf("body: want {\"approved\": true|false}"))
		return
	}
	k, err := h.sessionKey(r)
	if err != nil {
		WriteErr(w, err)
		return
	}
	turn, err := h.runner.Decide(r.Context(), k, r.PathValue("iid"), *d.Approved)
	if err != nil {
		// The paused harness is another replica's: answered there.
		var served bool
		turn, served, err = h.elsewhere(w, r, body, err, func() (*runner.Turn, error) {
			return h.runner.Decide(r.Context(), k, r.PathValue("iid"), *d.Approved)
		})
		if served {
			return
		}
		if err != nil {
			h.handoffDraining(w, r, err)
			WriteErr(w, err)
			return
		}
	}
	h.runTurn(w, r, turn)
}
