package tools

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/wire"
)

// ServerName is the reserved name the runner's tool server goes by, in
// the harness's MCP configuration (docs/contract.md, The request).
const ServerName = "agenta-tools"

// Log keys this package adds; internal/logkey has no tool keys yet.
const (
	keyTool    = "tool"
	keyCallID  = "call_id"
	keyOutcome = "outcome"
	keyStatus  = "status"
)

// resolveTimeout bounds CheckMCPServer's DNS lookup.
const resolveTimeout = 5 * time.Second

// Set is the tool server of one turn.
type Set struct {
	cfg      Config
	log      *slog.Logger
	endpoint string
	auth     string
	guard    *guard
	client   *http.Client
	server   *mcp.Server
	specs    map[string]*entry
	tools    []*mcp.Tool
	runCtx   map[string]any // for $ctx bindings

	// mu guards the following.
	mu       sync.Mutex
	closed   bool
	inflight map[*CallRecord]context.CancelCauseFunc
}

// New validates specs and the callback endpoint and builds the turn's
// tool server. Every problem with specs is reported at once, joined.
// Errors are classed errdefs.ErrInvalid (a malformed spec, a blocked
// endpoint), or errdefs.ErrUnprocessable (kind code or client). The
// endpoint is trusted and not resolved here: a host that does not resolve
// fails the calls that need it, as tool errors. A nil logger discards.
func New(cfg Config, specs []wire.ToolSpec, cb *wire.ToolCallback, logger *slog.Logger) (*Set, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	s := &Set{
		cfg:   cfg,
		log:   logger,
		guard: newGuard(cfg.HostAllowlist, cfg.Resolver),
		specs: make(map[string]*entry, len(specs)),
	}
	var errs []error
	for i, sp := range specs {
		e, err := validate(sp)
		if err != nil {
			errs = append(errs, fmt.Errorf("customTools[%d]: %w", i, err))
			continue
		}
		if _, dup := s.specs[sp.Name]; dup {
			errs = append(errs, errdefs.Invalidf("customTools[%d]: tool %q: duplicate name", i, sp.Name))
			continue
		}
		s.specs[sp.Name] = e
		s.tools = append(s.tools, e.tool)
	}
	runCtx, err := runContext(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.runCtx = runCtx
	if s.cfg.RunKind == "" {
		if k, ok := deepGet(runCtx, "run.kind"); ok {
			s.cfg.RunKind, _ = k.(string)
		}
	}
	if s.needsCallback() {
		if err := s.setEndpoint(cb); err != nil {
			return nil, err
		}
	}
	s.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // the platform's API is reached directly, as the sidecar does
			DialContext:           s.guard.dialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		// A redirect could point anywhere; the callback answers in place.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.server = mcp.NewServer(&mcp.Implementation{Name: ServerName, Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, t := range s.tools {
		s.server.AddTool(t, s.Handle)
	}
	return s, nil
}

// needsCallback reports whether a tool posts to the callback: every
// kind but the browser-fulfilled client tools.
func (s *Set) needsCallback() bool {
	for _, e := range s.specs {
		if e.spec.Kind != "client" {
			return true
		}
	}
	return false
}

func (s *Set) setEndpoint(cb *wire.ToolCallback) error {
	if cb == nil || cb.Endpoint == "" {
		return errdefs.Invalidf("customTools need toolCallback.endpoint")
	}
	u, err := url.Parse(cb.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not echoed: its query may carry a credential.
		return errdefs.Invalidf("toolCallback.endpoint: not an absolute http(s) URL")
	}
	// No address check and no DNS here: the callback is the platform's
	// own API, trusted, and resolved when a call dials it.
	s.endpoint = u.String()
	s.auth = authorization(cb.Authorization)
	return nil
}

// authorization returns the Authorization header value. The contract
// (docs/contract.md, Tools) calls the value a per-turn bearer and Agenta sends it verbatim;
// a value that already names its scheme ("Bearer x", "ApiKey x") is sent
// as is, and a bare token gets the Bearer scheme it stands for.
func authorization(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v, " \t") {
		return v
	}
	return "Bearer " + v
}

// emptySchema is the schema of a tool that gives none: any object.
var emptySchema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":true}`)

// entry is a validated spec with its parsed private parts.
type entry struct {
	spec     wire.ToolSpec
	tool     *mcp.Tool         // the public part, advertised
	direct   *directCall       // nil: the /tools/call gateway
	bindings map[string]string // contextBindings
	required []string          // the schema's top-level required arguments
}

// runContext is the $ctx of bindings: Config.RunContext with the
// runner's own session id, which the platform cannot override.
func runContext(cfg Config) (map[string]any, error) {
	m := map[string]any{}
	if len(cfg.RunContext) > 0 && string(cfg.RunContext) != "null" {
		var err error
		if m, err = decodeObject(cfg.RunContext); err != nil {
			return nil, errdefs.Invalidf("runContext: %v", err)
		}
	}
	if cfg.SessionID != "" {
		if err := deepSet(m, "session.id", cfg.SessionID); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func validate(sp wire.ToolSpec) (*entry, error) {
	if err := validName(sp.Name); err != nil {
		return nil, errdefs.Invalidf("tool %q: %v", sp.Name, err)
	}
	switch sp.Kind {
	case "", "callback":
	case "code":
		return nil, errdefs.Unprocessablef("tool %q: kind \"code\" is not supported: code tools were removed from the runner", sp.Name)
	case "client":
		// Fulfilled by the caller's browser through Config.Client.
	default:
		return nil, errdefs.Invalidf("tool %q: unknown kind %q (want callback)", sp.Name, sp.Kind)
	}
	e := &entry{spec: sp}
	hasCall := len(sp.Call) > 0 && string(sp.Call) != "null"
	if hasCall && sp.CallRef != "" {
		return nil, errdefs.Invalidf("tool %q: has both call and callRef (want one)", sp.Name)
	}
	if hasCall {
		dc, err := parseDirect(sp.Name, sp.Call)
		if err != nil {
			return nil, err
		}
		e.direct = dc
	}
	b, err := parseBindings(sp.Name, sp.ContextBindings)
	if err != nil {
		return nil, err
	}
	e.bindings = b
	if sp.TimeoutMS < 0 {
		return nil, errdefs.Invalidf("tool %q: timeoutMs %d is negative", sp.Name, sp.TimeoutMS)
	}
	schema := sp.Schema()
	if len(schema) == 0 || string(schema) == "null" {
		schema = emptySchema
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(schema, &obj); err != nil {
		return nil, errdefs.Invalidf("tool %q: input schema is not a JSON object", sp.Name)
	}
	if string(obj["type"]) != `"object"` {
		return nil, errdefs.Invalidf("tool %q: input schema must have \"type\": \"object\"", sp.Name)
	}
	if r, ok := obj["required"]; ok && json.Unmarshal(r, &e.required) != nil {
		return nil, errdefs.Invalidf("tool %q: input schema: required must be a list of names", sp.Name)
	}
	e.tool = &mcp.Tool{Name: sp.Name, Description: sp.Description, InputSchema: schema}
	if sp.ReadOnly {
		e.tool.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
	}
	return e, nil
}

// validName applies MCP's tool name rule: 1-128 of [A-Za-z0-9_.-].
func validName(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(name) > 128 {
		return errors.New("name longer than 128 bytes")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("name has invalid character %q (want A-Z a-z 0-9 _ - .)", r)
		}
	}
	return nil
}

// Server returns the MCP server of the set. It may be connected any
// number of times, over any transport; each connection is one session.
func (s *Set) Server() *mcp.Server { return s.server }

// Serve runs one MCP session over t until the client disconnects or ctx
// is cancelled, which closes the session. It returns nil when the client
// ended the session.
func (s *Set) Serve(ctx context.Context, t mcp.Transport) error {
	ss, err := s.server.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("connect mcp session: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { ss.Close() })
	defer stop()
	err = ss.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Tools returns the tools as advertised: names, descriptions, schemas.
// Only these public fields ever reach the sandbox.
func (s *Set) Tools() []*mcp.Tool { return s.tools }

// Close ends the set's turn: calls in flight are cancelled (the model
// reads that the call was cancelled), later calls are refused, and idle
// connections are released. Idempotent. MCP sessions stay connected; end
// them through their transport.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	for _, cancel := range s.inflight {
		cancel(errSetClosed)
	}
	s.mu.Unlock()
	s.client.CloseIdleConnections()
}

var errSetClosed = errors.New("the turn ended")

// track registers a call so Close can cancel it; the returned func
// deregisters it. ok is false when the set is already closed.
func (s *Set) track(ctx context.Context, rec *CallRecord) (context.Context, func(), bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel(errSetClosed)
		return ctx, func() {}, false
	}
	if s.inflight == nil {
		s.inflight = map[*CallRecord]context.CancelCauseFunc{}
	}
	s.inflight[rec] = cancel
	return ctx, func() {
		s.mu.Lock()
		delete(s.inflight, rec)
		s.mu.Unlock()
		cancel(nil)
	}, true
}

// Handle executes one MCP tools/call against the set. It is the handler
// of every tool of Server, exported so another MCP server (the relay's)
// can delegate to the current turn's set. It never returns a Go error:
// every failure reaches the model as a tool error result.
func (s *Set) Handle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	rec := CallRecord{Call: Call{Tool: req.Params.Name, ID: callID(req.Params.Meta)}, Start: time.Now()}
	var text string
	var err error
	if _, ok := s.specs[rec.Tool]; !ok {
		rec.Outcome = OutcomeInvalid
		err = fmt.Errorf("tool %s is not available in this turn", rec.Tool)
	} else if cctx, done, ok := s.track(ctx, &rec); !ok {
		rec.Outcome = OutcomeCancelled
		err = fmt.Errorf("tool %s: not run: %w", rec.Tool, errSetClosed)
	} else {
		text, err = s.call(cctx, &rec, req.Params.Arguments)
		done()
	}
	rec.Duration = time.Since(rec.Start)
	res := &mcp.CallToolResult{}
	if err != nil {
		rec.Err = err.Error()
		res.IsError = true
		res.Content = []mcp.Content{&mcp.TextContent{Text: rec.Err}}
	} else {
		rec.Outcome = OutcomeOK
		res.Content = []mcp.Content{&mcp.TextContent{Text: text}}
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "tool call",
		slog.String(keyTool, rec.Tool), slog.String(keyCallID, rec.ID),
		slog.String(keyOutcome, string(rec.Outcome)), slog.Int(keyStatus, rec.Status),
		slog.Int64(logkey.Duration, rec.Duration.Milliseconds()))
	if s.cfg.OnCall != nil {
		s.cfg.OnCall(rec)
	}
	return res, nil
}

// callIDKeys are the _meta keys MCP clients put the model's tool call id
// under; Claude Code sends claudecode/toolUseId.
var callIDKeys = []string{"claudecode/toolUseId", "toolCallId", "tool_call_id", "toolUseId"}

func callID(meta mcp.Meta) string {
	for _, k := range callIDKeys {
		if v, ok := meta[k].(string); ok && v != "" {
			return v
		}
	}
	return "call_" + rand.Text()
}
