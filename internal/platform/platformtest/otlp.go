package platformtest

import (
	"encoding/hex"
	"net/http"
	"strconv"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is an exported span the fake's OTLP receiver decoded.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Attributes                map[string]string
	// Authorization is the header the export carried.
	Authorization string
}

// otlp decodes an OTLP/HTTP protobuf export (POST /otlp/v1/traces), as
// the platform's ingest does; called with f.mu held.
func (f *Fake) otlp(r *http.Request, body []byte) (int, any, map[string]string) {
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return http.StatusBadRequest, detail("not an OTLP protobuf export: " + err.Error()), nil
	}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId), ParentID: hex.EncodeToString(s.ParentSpanId),
					Name: s.Name, Attributes: map[string]string{}, Authorization: r.Header.Get("Authorization")}
				for _, kv := range s.Attributes {
					sp.Attributes[kv.Key] = anyValue(kv.Value)
				}
				f.spans = append(f.spans, sp)
			}
		}
	}
	b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	return 200, b, map[string]string{"Content-Type": "application/x-protobuf"}
}

// anyValue is an attribute value as text.
func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return v.String()
}

// Spans returns the spans exported to the fake so far.
func (f *Fake) Spans() []Span {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Span(nil), f.spans...)
}
