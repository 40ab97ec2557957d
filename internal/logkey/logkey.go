// Package logkey holds the fixed slog attribute keys, so every log line
// names the same thing the same way.
package logkey

const (
	Session   = "session"
	Project   = "project"
	Turn      = "turn"
	Sandbox   = "sandbox"
	Provider  = "provider"
	Harness   = "harness"
	RequestID = "request_id"
	Error     = "err"
	Duration  = "duration_ms"
	Reason    = "reason"
	PID       = "pid"
	Addr      = "addr"
	Stage     = "stage"
	// The key gateway's audit: the variable a credential is bound to
	// (never its value), where a request carried it, and the upstream.
	Credential = "credential"
	Placement  = "placement"
	Host       = "host"
	// How many times something happened (logged once, not per line).
	Count = "count"
	// A background job, and the webhook event it posts.
	Job   = "job"
	Event = "event"
)
