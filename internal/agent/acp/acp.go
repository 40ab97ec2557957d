// Package acp drives a harness over the Agent Client Protocol (v1): it
// starts the harness process in a sandbox, initializes, opens or loads a
// session, sends prompts and maps session/update notifications to wire
// events.
//
// It speaks JSON-RPC through internal/jsonrpc rather than
// github.com/coder/acp-go-sdk: the SDK decodes updates into a closed union
// of generated structs, so unknown session/update variants and _meta would
// be lost, and the runner must pass both through untouched. The handful of
// ACP messages a client needs are declared here.
package acp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/jsonrpc"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

// ProtocolVersion is the ACP version this client speaks.
const ProtocolVersion = 1

// Driver implements agent.Driver over ACP.
type Driver struct {
	// ClientVersion is sent as clientInfo.version.
	ClientVersion string
	// CancelGrace bounds how long a cancelled prompt may take to end before
	// the harness is killed.
	CancelGrace time.Duration
	// InitTimeout bounds initialize + session/new (+ load).
	InitTimeout time.Duration
	// MaxLine caps one JSON-RPC line from the harness
	// (AGENTA_RUNNER_MAX_EVENT_BYTES); 0 is jsonrpc.DefaultMaxLine. A
	// longer line ends the session with an error naming the cap.
	MaxLine int
}

var _ agent.Driver = (*Driver)(nil)

// Open implements agent.Driver.
func (d *Driver) Open(ctx context.Context, sb sandbox.Sandbox, opts agent.Options) (agent.Session, error) {
	if len(opts.Spec.Command) == 0 {
		return nil, errdefs.Unprocessablef("harness %q has no command", opts.Spec.Name)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(logkey.Harness, opts.Spec.Name)
	proc, err := sb.Start(context.WithoutCancel(ctx), sandbox.Cmd{
		Path: opts.Spec.Command[0],
		Args: opts.Spec.Command[1:],
		Env:  opts.Env,
		Dir:  opts.Cwd,
	})
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, errdefs.With(errdefs.ErrUnprocessable, fmt.Errorf("harness %q: %w; install it or set AGENTA_RUNNER_HARNESS_%s to its command line", opts.Spec.Name, err, envName(opts.Spec.Name)))
		}
		return nil, fmt.Errorf("start harness %q: %w", opts.Spec.Name, err)
	}
	grace := d.CancelGrace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	s := &Session{
		spec:   opts.Spec,
		proc:   proc,
		perm:   opts.Permission,
		log:    log,
		grace:  grace,
		parked: map[string]*pendingPermission{},
		wake:   make(chan struct{}, 1),
	}
	s.conn = jsonrpc.New(proc.Stdout(), proc.Stdin(), jsonrpc.HandlerFunc(s.handle), jsonrpc.WithMaxLine(d.MaxLine))
	s.exited = make(chan struct{})
	go func() {
		s.exitErr = proc.Wait()
		close(s.exited)
	}()

	initTimeout := d.InitTimeout
	if initTimeout <= 0 {
		initTimeout = 2 * time.Minute
	}
	octx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	if err := s.open(octx, d.ClientVersion, opts); err != nil {
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, s.explain("open session", err)
	}
	return s, nil
}

func envName(harness string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(harness))
}

// Session is a live ACP session.
type Session struct {
	spec  agent.Spec
	proc  sandbox.Process
	conn  *jsonrpc.Conn
	perm  agent.PermissionFunc
	log   *slog.Logger
	grace time.Duration
	id    string
	info  agent.Info

	exited  chan struct{}
	exitErr error
	wake    chan struct{} // a permission request was parked

	closeOnce sync.Once

	// mu guards the following.
	mu      sync.Mutex
	sink    agent.Sink
	mapper  *mapper
	call    *promptCall
	parked  map[string]*pendingPermission
	permSeq int
	loading bool
	// cost is the session's cumulative cost as the harness last reported
	// it (usage_update.cost.amount, ACP's running total for the session).
	cost    float64
	foreign int // this turn's session/updates for another session id
	// opened is what session/new (or load) answered: the model and mode
	// choices SetModel and SetMode use.
	opened sessionResult
}

type promptCall struct {
	done chan struct{}
	res  promptResult
	err  error
	// costBase is the session's cost when the turn began: the turn's own
	// cost is what the harness reports beyond it.
	costBase float64
}

type pendingPermission struct {
	req    agent.PermissionRequest
	answer chan agent.Decision
	parked bool
}

// ID implements agent.Session.
func (s *Session) ID() string { return s.id }

// Info implements agent.Session.
func (s *Session) Info() agent.Info { return s.info }

func (s *Session) open(ctx context.Context, version string, opts agent.Options) error {
	var init initializeResult
	caps := clientCapabilities{FS: fsCapabilities{ReadTextFile: false, WriteTextFile: false}}
	if opts.Gateway != nil {
		caps.Auth = &authCapabilities{Meta: map[string]any{"gateway": true}}
	}
	err := s.conn.Call(ctx, "initialize", initializeParams{
		ProtocolVersion:    ProtocolVersion,
		ClientCapabilities: caps,
		ClientInfo:         implementation{Name: "runner", Version: version},
	}, &init)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if init.ProtocolVersion != ProtocolVersion {
		return errdefs.Unprocessablef("harness %q speaks ACP protocol version %d; runner speaks %d", s.spec.Name, init.ProtocolVersion, ProtocolVersion)
	}
	if err := s.authenticate(ctx, init, opts.Gateway); err != nil {
		return err
	}
	s.info = agent.Info{
		Harness:      s.spec.Name,
		AgentName:    init.AgentInfo.Name,
		AgentVersion: init.AgentInfo.Version,
		LoadSession:  init.AgentCapabilities.LoadSession,
		Capabilities: capabilities(s.spec, init.AgentCapabilities),
	}
	servers := mcpServers(opts.MCPServers)
	if opts.LoadSessionID != "" && init.AgentCapabilities.LoadSession && !s.spec.UnreliableLoad {
		meta := opts.Meta
		if s.spec.LoadMeta != nil {
			meta = mergeMeta(meta, s.spec.LoadMeta(opts.LoadSessionID))
		}
		s.mu.Lock()
		s.loading = true // the history replay is not part of any turn
		s.mu.Unlock()
		var res sessionResult
		err := s.conn.Call(ctx, "session/load", loadParams{SessionID: opts.LoadSessionID, Cwd: opts.Cwd, MCPServers: servers, Meta: meta}, &res)
		s.mu.Lock()
		s.loading = false
		s.mu.Unlock()
		if err == nil {
			s.id = opts.LoadSessionID
			s.info.Loaded = true
			return s.configure(ctx, res, opts)
		}
		s.log.Warn("session/load failed; opening a new session", logkey.Error, err)
	}
	var res sessionResult
	if err := s.conn.Call(ctx, "session/new", newParams{Cwd: opts.Cwd, MCPServers: servers, Meta: opts.Meta}, &res); err != nil {
		return fmt.Errorf("session/new: %w", err)
	}
	if res.SessionID == "" {
		return errdefs.Unprocessablef("harness %q returned no sessionId from session/new", s.spec.Name)
	}
	s.id = res.SessionID
	return s.configure(ctx, res, opts)
}

// authenticate sends gw with the harness's "gateway" auth method, when
// it offers one; otherwise, or if the harness refuses it, the harness
// authenticates from its environment (which carries the same key), as
// without gw. An error is only the connection's.
func (s *Session) authenticate(ctx context.Context, init initializeResult, gw *agent.GatewayAuth) error {
	if gw == nil || !slices.ContainsFunc(init.AuthMethods, func(m authMethod) bool { return m.ID == "gateway" }) {
		return nil
	}
	headers := gw.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	p := authenticateParams{MethodID: "gateway", Meta: map[string]any{"gateway": map[string]any{"baseUrl": gw.BaseURL, "headers": headers}}}
	err := s.conn.Call(ctx, "authenticate", p, nil)
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		s.log.Warn("the harness refused gateway authentication; it authenticates from its environment", logkey.Error, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("authenticate (gateway): %w", err)
	}
	return nil
}

func (s *Session) configure(ctx context.Context, res sessionResult, opts agent.Options) error {
	s.mu.Lock()
	s.opened = res
	s.mu.Unlock()
	if res.Modes != nil {
		for _, m := range res.Modes.AvailableModes {
			if m.ID == "plan" {
				s.info.Capabilities.PlanMode = true
			}
		}
	}
	if opts.Mode != "" && res.Modes != nil && res.Modes.CurrentModeID != opts.Mode {
		if err := s.conn.Call(ctx, "session/set_mode", setModeParams{SessionID: s.id, ModeID: opts.Mode}, nil); err != nil {
			return fmt.Errorf("session/set_mode %q: %w", opts.Mode, err)
		}
	}
	return nil
}

var _ agent.Rebinder = (*Session)(nil)

// SetModel implements agent.Rebinder: through the session's "model"
// config option when it has one (Claude Code), else session/set_model
// (the models the session listed). A session that offers neither is an
// errdefs.ErrUnprocessable error.
func (s *Session) SetModel(ctx context.Context, model string) error {
	s.mu.Lock()
	res := s.opened
	s.mu.Unlock()
	for _, o := range res.ConfigOptions {
		if o.ID == "model" || o.Category == "model" {
			if err := s.conn.Call(ctx, "session/set_config_option", setConfigParams{SessionID: s.id, ConfigID: o.ID, Value: model}, nil); err != nil {
				return fmt.Errorf("session/set_config_option %s=%q: %w", o.ID, model, err)
			}
			return nil
		}
	}
	if res.Models == nil {
		return errdefs.Unprocessablef("harness %q offers no model choice on an open session", s.spec.Name)
	}
	if res.Models.CurrentModelID == model {
		return nil
	}
	if err := s.conn.Call(ctx, "session/set_model", setModelParams{SessionID: s.id, ModelID: model}, nil); err != nil {
		return fmt.Errorf("session/set_model %q: %w", model, err)
	}
	return nil
}

// SetMode implements agent.Rebinder with session/set_mode.
func (s *Session) SetMode(ctx context.Context, mode string) error {
	if err := s.conn.Call(ctx, "session/set_mode", setModeParams{SessionID: s.id, ModeID: mode}, nil); err != nil {
		return fmt.Errorf("session/set_mode %q: %w", mode, err)
	}
	return nil
}

// explain turns a transport failure into the harness's own story: its exit
// status and the tail of its stderr.
func (s *Session) explain(op string, err error) error {
	if cerr := s.conn.Err(); errors.Is(cerr, jsonrpc.ErrLineTooLong) {
		// The harness is alive and blocked on a pipe nobody reads: its
		// exit would tell nothing.
		return errdefs.With(errdefs.ErrTooLarge, fmt.Errorf("%s: harness %s sent a message over AGENTA_RUNNER_MAX_EVENT_BYTES (%w); raise it if the harness is legitimate", op, s.spec.Name, cerr))
	}
	select {
	case <-s.exited:
	case <-time.After(2 * time.Second):
		return fmt.Errorf("%s: %w", op, err)
	}
	exit := s.exitErr
	if exit == nil {
		exit = errors.New("exited")
	}
	return fmt.Errorf("%s: %w", op, &agent.ExitError{Harness: s.spec.Name, Err: exit, StderrTail: lastLines(s.proc.StderrTail(), 20, 2000)})
}

func lastLines(s string, n, max int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

// Close implements agent.Session.
func (s *Session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		busy := s.call != nil
		s.mu.Unlock()
		if busy && s.id != "" {
			_ = s.conn.Notify("session/cancel", cancelParams{SessionID: s.id})
		}
		s.answerAll(agent.Decision{}, true)
		_ = s.proc.Stdin().Close()
		select {
		case <-s.exited:
		case <-time.After(200 * time.Millisecond):
			_ = s.proc.Kill()
			<-s.exited
		case <-ctx.Done():
			_ = s.proc.Kill()
			<-s.exited
		}
		s.conn.Close()
	})
	return nil
}

func mergeMeta(a, b map[string]any) map[string]any {
	if len(a) == 0 {
		return b
	}
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func capabilities(spec agent.Spec, c agentCapabilities) (out wireCaps) {
	out.TextMessages = true
	out.Images = c.PromptCapabilities.Image
	out.FileAttachments = c.PromptCapabilities.EmbeddedContext
	out.MCPTools = !spec.NoMCP
	out.ToolCalls = true
	out.Reasoning = true
	out.Permissions = true
	out.Usage = true
	out.SessionLifecycle = c.LoadSession
	return out
}
