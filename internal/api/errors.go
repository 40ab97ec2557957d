package api

import (
	"bytes"
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
	case errors.Is(err, errdefs.ErrForbidden):
		return http.StatusForbidden
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
	case errors.Is(err, errdefs.ErrUnavailable), errors.Is(err, errdefs.ErrFenced):
		// Fenced: another replica took the session over while this one
		// ran the turn; the session is served there, so a retry succeeds.
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// WriteErr writes err with the status of its class.
func WriteErr(w http.ResponseWriter, err error) {
	WriteError(w, statusOf(err), err.Error())
}

// errorBody is the wire's error shape, ok first as the reference writes it.
type errorBody struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// WriteError writes the wire's error shape.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, errorBody{Error: msg})
}

// WriteJSON writes v as JSON with an explicit length.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	b := []byte(`{"ok":false,"error":"encode response"}` + "\n")
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
	} else {
		b = buf.Bytes()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
