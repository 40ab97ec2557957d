package api

import (
	"errors"
	"net/http"
)

// ready is readiness, distinct from liveness (/health): 503 while the
// replica drains for a restart, so a load balancer stops sending it turns
// while its running turns finish, and while its store cannot be written.
// Served at GET /ready and at GET /health?ready=1 (for probes that can
// only vary the query); unauthenticated, like /health.
func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"status": "ready", "ready": true, "version": h.cfg.Version}
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(); err != nil {
			body["status"], body["ready"], body["error"] = readyStatus(err), false, err.Error()
			WriteJSON(w, http.StatusServiceUnavailable, body)
			return
		}
	}
	WriteJSON(w, http.StatusOK, body)
}

// readyStatus is the status word of a readiness error: its ReadyStatus
// ("store_unwritable"), else "draining".
func readyStatus(err error) string {
	var s interface{ ReadyStatus() string }
	if errors.As(err, &s) {
		return s.ReadyStatus()
	}
	return "draining"
}
