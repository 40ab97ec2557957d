// Package traces exports each turn as OpenTelemetry spans (invoke_agent
// → turn → execute_tool) over OTLP/HTTP to the request's telemetry
// endpoint with its headers, parented on the request's traceparent, as
// the reference runner does (docs/contract.md, Traces). A turn without telemetry
// is not traced. One tracer provider serves every turn; spans are
// routed, per trace, to an exporter per target, and each trace is
// exported in one batch after its turn, off the turn's path.
package traces

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/wire"
)

// Config configures the exporter.
type Config struct {
	// Timeout bounds one export (10 s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Tracer is a platform.Observer that traces turns.
type Tracer struct {
	cfg    Config
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	wg     sync.WaitGroup

	// mu guards the following.
	mu        sync.Mutex
	pending   map[trace.TraceID]*batch
	exporters map[string]*otlptrace.Exporter
}

type batch struct {
	target target
	spans  []sdktrace.ReadOnlySpan
}

type target struct {
	endpoint string
	headers  map[string]string
}

func (t target) key() string {
	h := sha256.New()
	h.Write([]byte(t.endpoint))
	for _, k := range slices.Sorted(maps.Keys(t.headers)) {
		fmt.Fprintf(h, "\x00%s\x00%s", k, t.headers[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

var _ platform.Observer = (*Tracer)(nil)

// New returns a tracer; Close it after the last turn.
func New(cfg Config) *Tracer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Tracer{cfg: cfg, pending: map[trace.TraceID]*batch{}, exporters: map[string]*otlptrace.Exporter{}}
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor((*router)(t)), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.tracer = t.tp.Tracer("github.com/agentrunner/runner")
	return t
}

// router collects ended spans by trace.
type router Tracer

func (r *router) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (r *router) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.pending[s.SpanContext().TraceID()]; b != nil {
		b.spans = append(b.spans, s)
	}
}

func (r *router) Shutdown(context.Context) error   { return nil }
func (r *router) ForceFlush(context.Context) error { return nil }

// Close waits for the exports in flight, bounded by ctx.
func (t *Tracer) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	t.mu.Lock()
	exps := slices.Collect(maps.Values(t.exporters))
	t.mu.Unlock()
	for _, e := range exps {
		_ = e.Shutdown(ctx)
	}
	return t.tp.Shutdown(ctx)
}

// Begin implements platform.Observer.
func (t *Tracer) Begin(ctx context.Context, b platform.TurnBegin) platform.TurnObserver {
	tel := b.Request.TelemetryConfig()
	endpoint, headers := tel.OTLP()
	if endpoint == "" {
		return nil
	}
	parent := context.Background()
	if tp, baggage := b.Request.Propagation(); tp != "" {
		parent = propagation.TraceContext{}.Extract(parent, propagation.MapCarrier{"traceparent": tp, "baggage": baggage})
	}
	attrs := []attribute.KeyValue{
		attribute.String("openinference.span.kind", "AGENT"),
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", b.Harness),
	}
	if b.SessionID != "" {
		attrs = append(attrs, attribute.String("session.id", b.SessionID), attribute.String("gen_ai.conversation.id", b.SessionID))
	}
	actx, agent := t.tracer.Start(parent, "invoke_agent", trace.WithAttributes(attrs...))
	t.mu.Lock()
	t.pending[agent.SpanContext().TraceID()] = &batch{target: target{endpoint: endpoint, headers: headers}}
	t.mu.Unlock()
	n := b.TurnIndex
	if n < 0 {
		n = 0
	}
	tctx, turn := t.tracer.Start(actx, fmt.Sprintf("turn %d", n), trace.WithAttributes(
		attribute.String("openinference.span.kind", "CHAIN"), attribute.Int("ag.turn.index", n), attribute.String("ag.turn.id", b.TurnID)))
	return &turnTrace{t: t, agent: agent, turn: turn, ctx: tctx, content: tel.CaptureContent(), tools: map[string]trace.Span{}}
}

var (
	_ platform.TurnObserver    = (*turnTrace)(nil)
	_ platform.TraceIdentifier = (*turnTrace)(nil)
)

// turnTrace traces one turn. Event and End run on the turn's path, in
// order.
type turnTrace struct {
	t       *Tracer
	agent   trace.Span
	turn    trace.Span
	ctx     context.Context
	content bool
	tools   map[string]trace.Span
	ended   bool
}

// TraceID implements platform.TraceIdentifier.
func (tt *turnTrace) TraceID() string { return tt.agent.SpanContext().TraceID().String() }

// Event implements platform.TurnObserver.
func (tt *turnTrace) Event(ev wire.Event) {
	switch ev.Type {
	case wire.EventToolCall:
		s, ok := tt.tools[ev.ID]
		if !ok {
			_, s = tt.t.tracer.Start(tt.ctx, "execute_tool "+ev.Name, trace.WithAttributes(
				attribute.String("openinference.span.kind", "TOOL"),
				attribute.String("gen_ai.operation.name", "execute_tool"),
				attribute.String("gen_ai.tool.name", ev.Name),
				attribute.String("gen_ai.tool.call.id", ev.ID)))
			tt.tools[ev.ID] = s
		}
		if tt.content && len(ev.Input) > 0 {
			s.SetAttributes(attribute.String("input.value", string(ev.Input)))
		}
	case wire.EventToolResult:
		s, ok := tt.tools[ev.ID]
		if !ok {
			return
		}
		delete(tt.tools, ev.ID)
		if tt.content {
			s.SetAttributes(attribute.String("output.value", outputText(ev.Output)))
		}
		if ev.IsError || ev.Denied {
			s.SetStatus(codes.Error, "tool failed or denied")
		}
		s.End()
	}
}

// End implements platform.TurnObserver: the spans end with the turn's
// harness, model, usage and stop reason, and the trace is exported.
func (tt *turnTrace) End(e platform.TurnEnd) {
	if tt.ended {
		return
	}
	tt.ended = true
	for _, s := range tt.tools {
		s.End()
	}
	attrs := []attribute.KeyValue{attribute.String("ag.stop_reason", e.StopReason), attribute.StringSlice("gen_ai.response.finish_reasons", []string{e.StopReason})}
	if e.Model != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", e.Model))
	}
	if u := e.Usage; u != nil {
		attrs = append(attrs,
			attribute.Int64("gen_ai.usage.input_tokens", u.Input), attribute.Int64("gen_ai.usage.output_tokens", u.Output),
			attribute.Int64("gen_ai.usage.total_tokens", u.Total), attribute.Float64("gen_ai.usage.cost", u.Cost))
	}
	if e.AgentSessionID != "" {
		attrs = append(attrs, attribute.String("ag.agent_session.id", e.AgentSessionID))
	}
	tt.turn.SetAttributes(attrs...)
	tt.agent.SetAttributes(attrs...)
	if e.Err != nil {
		tt.turn.SetStatus(codes.Error, e.Err.Error())
		tt.agent.SetStatus(codes.Error, e.Err.Error())
	}
	tt.turn.End()
	tt.agent.End()
	tt.t.flush(tt.agent.SpanContext().TraceID())
}

// flush exports the trace's spans in one batch (the platform rolls up
// cost and tokens per batch), in the background.
func (t *Tracer) flush(id trace.TraceID) {
	t.mu.Lock()
	b := t.pending[id]
	delete(t.pending, id)
	t.mu.Unlock()
	if b == nil || len(b.spans) == 0 {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
		defer cancel()
		exp, err := t.exporter(ctx, b.target)
		if err == nil {
			err = exp.ExportSpans(ctx, b.spans)
		}
		if err != nil {
			t.cfg.Logger.Warn("trace export failed", "trace", id.String(), "err", err)
		}
	}()
}

// exporter is the cached exporter of a target.
func (t *Tracer) exporter(ctx context.Context, tg target) (*otlptrace.Exporter, error) {
	key := tg.key()
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.exporters[key]; e != nil {
		return e, nil
	}
	e, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(tg.endpoint), otlptracehttp.WithHeaders(tg.headers), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %s: %w", tg.endpoint, err)
	}
	t.exporters[key] = e
	return e, nil
}

func outputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}
