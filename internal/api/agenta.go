package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// wantsNDJSON reports whether the caller asked for a stream.
func wantsNDJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")
}

// refuse answers a run the runner will not start. A streaming caller
// (Agenta's client treats any status >= 400 as a transport failure and
// shows only the status) gets a 200 stream whose single result carries
// the message, as the reference runner does; 401 and 413 keep their
// statuses, and the one-shot JSON mode keeps every status.
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	if !wantsNDJSON(r) || errors.Is(err, errdefs.ErrUnauthorized) || errors.Is(err, errdefs.ErrForbidden) || errors.Is(err, errdefs.ErrTooLarge) {
		WriteErr(w, err)
		return
	}
	out := startNDJSON(w)
	res := wire.Result{Error: err.Error(), Messages: []wire.OutMessage{}, Events: []wire.Event{}}
	out.write(wire.Record{Kind: wire.RecordResult, Result: &res})
}

// runnerOnly reports whether ev is one of this runner's own data events
// (harness session bookkeeping, audit) that Agenta's web app does not
// know: they stay in the session log and /v1, off the Agenta stream,
// where the Vercel adapter would turn them into data parts of the
// assistant message.
func runnerOnly(ev wire.Event) bool {
	if ev.Type != wire.EventData {
		return false
	}
	return strings.HasPrefix(ev.Name, "agent-session") || strings.HasPrefix(ev.Name, "audit.")
}
