package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/agentrunner/runner/internal/errdefs"
)

// statusOf is the one mapping from error class to HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errdefs.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, errdefs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errdefs.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrUnprocessable):
		return http.StatusUnprocessableEntity
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrExhausted):
		return http.StatusTooManyRequests
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// WriteErr writes err with the status of its class.
func WriteErr(w http.ResponseWriter, err error) {
	WriteError(w, statusOf(err), err.Error())
}

// WriteError writes the wire's error shape.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]any{"ok": false, "error": msg})
}

// WriteJSON writes v as JSON with an explicit length.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"ok":false,"error":"encode response"}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
