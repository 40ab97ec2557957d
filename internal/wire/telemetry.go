package wire

import (
	"encoding/json"
	"strings"
)

// Telemetry is the request's telemetry field: where traces go, and the
// caller's platform credential riding the exporter headers.
type Telemetry struct {
	Capture *struct {
		Content *struct {
			Enabled *bool `json:"enabled,omitempty"`
		} `json:"content,omitempty"`
	} `json:"capture,omitempty"`
	Exporters *struct {
		OTLP *struct {
			Endpoint string            `json:"endpoint,omitempty"`
			Headers  map[string]string `json:"headers,omitempty"`
		} `json:"otlp,omitempty"`
	} `json:"exporters,omitempty"`
}

// TelemetryConfig parses the telemetry field; a missing or malformed
// one is empty (telemetry is best effort, never a refusal).
func (r *Request) TelemetryConfig() Telemetry {
	var t Telemetry
	if len(r.Telemetry) > 0 {
		_ = json.Unmarshal(r.Telemetry, &t)
	}
	return t
}

// OTLP returns the trace exporter's endpoint and headers, if any.
func (t Telemetry) OTLP() (endpoint string, headers map[string]string) {
	if t.Exporters == nil || t.Exporters.OTLP == nil {
		return "", nil
	}
	return strings.TrimSpace(t.Exporters.OTLP.Endpoint), t.Exporters.OTLP.Headers
}

// Credential is the caller's platform credential: the exporter's
// authorization header, verbatim (trimmed), as the reference reads it.
func (t Telemetry) Credential() string {
	_, h := t.OTLP()
	for _, k := range []string{"authorization", "Authorization"} {
		if v := strings.TrimSpace(h[k]); v != "" {
			return v
		}
	}
	return ""
}

// CaptureContent reports whether message and tool content may go into
// spans (telemetry.capture.content.enabled, default true).
func (t Telemetry) CaptureContent() bool {
	if t.Capture == nil || t.Capture.Content == nil || t.Capture.Content.Enabled == nil {
		return true
	}
	return *t.Capture.Content.Enabled
}

// APIBaseFromOTLP is the part of an OTLP endpoint before "/otlp/": the
// platform API the exporter belongs to; "" when it has none.
func APIBaseFromOTLP(endpoint string) string {
	i := strings.Index(endpoint, "/otlp/")
	if i < 0 {
		return ""
	}
	return strings.TrimRight(endpoint[:i], "/")
}

// Propagation is the request's W3C trace context (context.propagation).
func (r *Request) Propagation() (traceparent, baggage string) {
	if len(r.Context) == 0 {
		return "", ""
	}
	var c struct {
		Propagation *struct {
			Traceparent string `json:"traceparent"`
			Baggage     string `json:"baggage"`
		} `json:"propagation"`
	}
	if json.Unmarshal(r.Context, &c) != nil || c.Propagation == nil {
		return "", ""
	}
	return c.Propagation.Traceparent, c.Propagation.Baggage
}
