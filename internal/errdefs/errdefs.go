// Package errdefs holds the error classes shared by every layer. Code wraps
// them with %w and callers test with errors.Is; only package api turns a
// class into an HTTP status. It imports nothing but the standard library.
package errdefs

import "errors"

var (
	// ErrInvalid: the caller sent something malformed or not allowed (400/422).
	ErrInvalid = errors.New("invalid")
	// ErrUnprocessable: well-formed input that names something unknown or disabled (422).
	ErrUnprocessable = errors.New("unprocessable")
	// ErrNotFound: the named thing does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the thing exists but is in the wrong state (409).
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: a dependency or capability cannot serve now (503).
	ErrUnavailable = errors.New("unavailable")
	// ErrExhausted: a limit was reached (429).
	ErrExhausted = errors.New("exhausted")
	// ErrTooLarge: a body or value exceeds its cap (413).
	ErrTooLarge = errors.New("too large")
	// ErrUnauthorized: missing or wrong credentials (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: valid credentials that do not cover the request (403).
	ErrForbidden = errors.New("forbidden")
	// ErrFenced: a write by a replica whose lease on the session another
	// replica has since taken over; refused, nothing of it written (503:
	// the session is served by its new owner, a retry reaches it). Not an
	// ErrConflict: a refused outcome (ErrConflict) still writes its events.
	ErrFenced = errors.New("fenced")
)

// classed is an error that carries a class for errors.Is without changing
// its message.
type classed struct {
	class error
	err   error
}

func (c classed) Error() string   { return c.err.Error() }
func (c classed) Unwrap() []error { return []error{c.err, c.class} }

// With attaches class to err so errors.Is(err, class) holds while the
// message stays err's own.
func With(class, err error) error {
	if err == nil {
		return nil
	}
	return classed{class: class, err: err}
}

// Invalidf formats a message classed as ErrInvalid.
func Invalidf(format string, args ...any) error {
	return With(ErrInvalid, errorf(format, args...))
}

// Unprocessablef formats a message classed as ErrUnprocessable.
func Unprocessablef(format string, args ...any) error {
	return With(ErrUnprocessable, errorf(format, args...))
}
