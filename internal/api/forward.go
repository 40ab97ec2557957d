package api

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/peer"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/store"
)

// Forwarder sends a request for a session another replica holds to that
// replica (internal/peer.Peers.Forward's contract).
type Forwarder interface {
	Forward(w http.ResponseWriter, r *http.Request, body []byte, owner string) error
}

// routeAttempts bounds how often one request follows a session that
// keeps moving (taken over by a third replica meanwhile) before it is
// refused with the last answer.
const routeAttempts = 4

// forwarded reports a request another replica sent here: it is answered
// or refused here, never forwarded again.
func forwarded(r *http.Request) bool { return r.Header.Get(peer.HeaderForwarded) != "" }

// checkPeer admits a forwarded request only with the peer token; the
// caller's own token is checked after, as on any request.
func (h *Handler) checkPeer(r *http.Request) error {
	if !forwarded(r) {
		return nil
	}
	got := r.Header.Get(peer.HeaderToken)
	if h.cfg.PeerToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.cfg.PeerToken)) != 1 {
		return errdefs.With(errdefs.ErrForbidden, errors.New("a forwarded request ("+peer.HeaderForwarded+") is accepted only from a replica presenting the peer token (AGENTA_RUNNER_PEER_TOKEN, the same on every replica)"))
	}
	return nil
}

// elsewhere serves a turn Start refused because another replica holds
// its session (err wraps the *store.LeaseError): forwarded there, or,
// when that replica is gone, taken over and started here by start. It
// returns the turn to run here, or served when the answer was written,
// or the error to refuse with (err itself when it is no such refusal).
func (h *Handler) elsewhere(w http.ResponseWriter, r *http.Request, body []byte, err error, start func() (*runner.Turn, error)) (turn *runner.Turn, served bool, _ error) {
	for range routeAttempts {
		var le *store.LeaseError
		if !errors.As(err, &le) || h.cfg.Peers == nil {
			return nil, false, err
		}
		if forwarded(r) {
			// The sender read a lease that has moved: it reads it again.
			w.Header().Set(peer.HeaderHandoff, peer.HandoffMoved)
			return nil, false, err
		}
		if !h.follow(w, r, body, le.Lease()) {
			return nil, true, nil
		}
		if turn, err = start(); err == nil {
			return turn, false, nil
		}
	}
	return nil, false, err
}

// follow forwards r to the holder of lease l. It reports false when the
// holder's answer was written; true when the caller should act here: the
// holder was gone and the session is now this replica's (or free), or
// the lease moved and must be read again.
func (h *Handler) follow(w http.ResponseWriter, r *http.Request, body []byte, l store.Lease) bool {
	err := h.cfg.Peers.Forward(w, r, body, l.Owner)
	if err == nil {
		h.holders.remember(l)
		return false
	}
	h.holders.forget(l.Key())
	var gone *peer.GoneError
	switch {
	case errors.Is(err, peer.ErrMoved):
		return true
	case errors.As(err, &gone):
		h.log.Info("session's replica is gone; taking the session over", logkey.Session, l.SessionID, logkey.Project, l.ProjectID, "replica", l.Owner, "why", gone.Why)
		if terr := h.runner.TakeOver(r.Context(), l); terr != nil {
			var le *store.LeaseError
			if !errors.As(terr, &le) { // another replica took it first: the caller reads it again
				refuse(w, r, terr)
				return false
			}
		}
		return true
	default:
		refuse(w, r, err)
		return false
	}
}

// routed forwards a request about session k (not a turn: /kill, DELETE,
// an events follow) to the replica that holds it, and reports whether it
// was answered there. Not forwarded, the caller serves it here: the
// session is held by nobody else, or was just taken over from a replica
// that is gone.
func (h *Handler) routed(w http.ResponseWriter, r *http.Request, body []byte, k store.SessionKey) bool {
	if h.cfg.Peers == nil || forwarded(r) {
		return false
	}
	for range routeAttempts {
		l, elsewhere, err := h.runner.Holder(r.Context(), k)
		if err != nil {
			WriteErr(w, err)
			return true
		}
		if !elsewhere {
			return false
		}
		if !h.follow(w, r, body, l) {
			return true
		}
	}
	return false
}

// handoffDraining marks the refusal of a forwarded request by a replica
// that is stopping, so that its sender takes the session over instead of
// passing the refusal on.
func (h *Handler) handoffDraining(w http.ResponseWriter, r *http.Request, err error) {
	if forwarded(r) && errors.Is(err, errdefs.ErrUnavailable) && h.runner.Draining() {
		w.Header().Set(peer.HeaderHandoff, peer.HandoffDraining)
	}
}

// holders remembers the leases of sessions lately forwarded, until they
// expire: the next turn of a warm session held elsewhere goes there at
// once, with no lease write here. An entry that went stale costs one
// refused hop (the holder answers "moved"), or a turn the old holder runs
// itself when the lease was let go, which is as right.
type holders struct {
	// mu guards m.
	mu sync.Mutex
	m  map[store.SessionKey]store.Lease
}

// maxHolders bounds the leases remembered.
const maxHolders = 1 << 16

func (c *holders) get(k store.SessionKey) (store.Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[k]
	if ok && !time.Now().Before(l.Expires) {
		delete(c.m, k)
		return store.Lease{}, false
	}
	return l, ok
}

func (c *holders) remember(l store.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxHolders {
		c.m = map[store.SessionKey]store.Lease{}
	}
	c.m[l.Key()] = l
}

func (c *holders) forget(k store.SessionKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > 0 {
		delete(c.m, k)
	}
}

// forwardKnown forwards a turn of session k straight to the replica it was
// last forwarded to, while that lease runs; it reports whether the answer
// was written. Otherwise the turn starts here as any other.
func (h *Handler) forwardKnown(w http.ResponseWriter, r *http.Request, body []byte, k store.SessionKey) bool {
	if h.cfg.Peers == nil || k.SessionID == "" || forwarded(r) {
		return false
	}
	l, ok := h.holders.get(k)
	return ok && !h.follow(w, r, body, l)
}
