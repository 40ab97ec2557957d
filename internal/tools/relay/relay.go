package relay

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/tools"
)

// Environment of the mcp-stdio process, set in the harness's MCP server
// entry.
const (
	EnvSocket = "RUNNER_TOOLS_SOCKET" // the socket's path inside the sandbox
	EnvToken  = "RUNNER_TOOLS_SECRET" // the binding's token
)

// The hello exchange: the client sends `RUNNER-TOOLS/1 <token>\n`; the
// relay answers "OK\n", or "ERR <reason>\n" and closes.
const (
	helloPrefix  = "RUNNER-TOOLS/1 "
	helloOK      = "OK\n"
	maxHello     = 256
	helloTimeout = 10 * time.Second
)

// ErrUnauthorized is a hello the relay refused.
var ErrUnauthorized = errors.New("tool relay refused the token")

// Relay serves the tool sessions of every binding.
type Relay struct {
	log *slog.Logger

	// mu guards the following.
	mu       sync.Mutex
	bindings map[string]*Binding // by id
}

// New returns a relay with no bindings. A nil logger discards.
func New(logger *slog.Logger) *Relay {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Relay{log: logger, bindings: map[string]*Binding{}}
}

// Binding is one harness session's access to the tools.
type Binding struct {
	relay  *Relay
	id     string
	secret string
	log    *slog.Logger
	server *mcp.Server
	set    atomic.Pointer[tools.Set]

	// mu guards the following.
	mu       sync.Mutex
	names    map[string]string // tools now on server: name → JSON
	sessions map[*mcp.ServerSession]bool
	closed   bool
	// gen counts the changes of the advertised tools; listed is, per
	// session, the gen it last listed them at; relisted is closed (and
	// replaced) whenever a session lists them.
	gen      int
	listed   map[*mcp.ServerSession]int
	relisted chan struct{}
}

// Bind registers a binding serving set (nil: none yet) under a fresh
// token. The logger carries the session's attributes.
func (r *Relay) Bind(set *tools.Set, logger *slog.Logger) *Binding {
	if logger == nil {
		logger = r.log
	}
	b := &Binding{
		relay:    r,
		id:       rand.Text(),
		secret:   rand.Text(),
		log:      logger,
		sessions: map[*mcp.ServerSession]bool{},
		listed:   map[*mcp.ServerSession]int{},
		relisted: make(chan struct{}),
	}
	// ListChanged: when Use swaps in a turn with other tools, connected
	// harnesses are told to list them again.
	b.server = mcp.NewServer(&mcp.Implementation{Name: tools.ServerName, Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	b.server.AddReceivingMiddleware(b.noteLists)
	b.Use(set)
	r.mu.Lock()
	r.bindings[b.id] = b
	r.mu.Unlock()
	return b
}

// Token is the secret the mcp-stdio process presents (EnvToken).
func (b *Binding) Token() string { return b.id + "." + b.secret }

// Env returns the environment of the harness's MCP server entry for a
// socket at socketPath (as seen inside the sandbox).
func (b *Binding) Env(socketPath string) map[string]string {
	return map[string]string{EnvSocket: socketPath, EnvToken: b.Token()}
}

// Use makes set the binding's current turn: calls from now on run
// against it, and the advertised tools become set's. A nil set refuses
// calls (between turns) and keeps the advertised list.
func (b *Binding) Use(set *tools.Set) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.set.Store(set)
	if set == nil {
		return
	}
	next := map[string]string{}
	for _, t := range set.Tools() {
		j, _ := json.Marshal(t)
		next[t.Name] = string(j)
	}
	var gone []string
	for n := range b.names {
		if _, ok := next[n]; !ok {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		b.server.RemoveTools(gone...)
	}
	// Re-adding an unchanged tool would notify every client for nothing;
	// a warm session usually keeps its tools from turn to turn.
	changed := len(gone) > 0
	for _, t := range set.Tools() {
		if b.names[t.Name] != next[t.Name] {
			b.server.AddTool(t, b.handle)
			changed = true
		}
	}
	b.names = next
	if changed {
		b.gen++
	}
}

// noteLists records each session's tools/list, for Listed.
func (b *Binding) noteLists(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/list" {
			return next(ctx, method, req)
		}
		b.mu.Lock()
		gen := b.gen // the list this call answers with, at the latest
		b.mu.Unlock()
		res, err := next(ctx, method, req)
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && err == nil {
			b.mu.Lock()
			b.listed[ss] = gen
			close(b.relisted)
			b.relisted = make(chan struct{})
			b.mu.Unlock()
		}
		return res, err
	}
}

// Listed waits until every session connected now has listed the tools
// since Use last changed them (the harness was told with
// notifications/tools/list_changed and asks again on its own time), so
// that a prompt sent next finds them; or until ctx ends, with its error.
// Without connected sessions it returns at once: one that connects later
// lists the current tools.
func (b *Binding) Listed(ctx context.Context) error {
	for {
		b.mu.Lock()
		behind := false
		for ss := range b.sessions {
			if b.listed[ss] < b.gen {
				behind = true
			}
		}
		wait := b.relisted
		b.mu.Unlock()
		if !behind {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *Binding) handle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	set := b.set.Load()
	if set == nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
			Text: "tool " + req.Params.Name + " was not run: no turn is running in this session",
		}}}, nil
	}
	return set.Handle(ctx, req)
}

// Close unregisters the binding and ends its connected sessions; its
// token stops working. Idempotent.
func (b *Binding) Close() {
	b.relay.mu.Lock()
	delete(b.relay.bindings, b.id)
	b.relay.mu.Unlock()
	b.mu.Lock()
	b.closed = true
	sessions := make([]*mcp.ServerSession, 0, len(b.sessions))
	for ss := range b.sessions {
		sessions = append(sessions, ss)
	}
	b.mu.Unlock()
	for _, ss := range sessions {
		ss.Close()
	}
}

// Listen creates the relay's unix socket at path, replacing a stale
// socket file, with the given permissions. The token, not the file mode,
// is the access control: sandboxes that run as another user need a mode
// that lets them connect.
func Listen(path string, mode fs.FileMode) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("listen %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen %s: remove stale socket: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return ln, nil
}

// Serve accepts connections on ln and serves each with ServeConn until
// ctx is cancelled, which closes ln and every connection. It returns
// after all of them have ended: nil when ctx ended it, else the accept
// error.
func (r *Relay) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept tool relay connection: %w", err)
		}
		wg.Go(func() {
			if err := r.ServeConn(ctx, conn); err != nil {
				r.log.LogAttrs(ctx, slog.LevelWarn, "tool relay connection", slog.String(logkey.Error, err.Error()))
			}
		})
	}
}

// ServeConn authenticates one connection and serves it an MCP session of
// its binding until the client disconnects, the binding closes or ctx is
// cancelled. conn is closed on return. A refused hello returns an error
// wrapping ErrUnauthorized; a session the client ended returns nil.
func (r *Relay) ServeConn(ctx context.Context, conn io.ReadWriteCloser) error {
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 4096)
	b, err := r.hello(ctx, conn, br)
	if err != nil {
		return err
	}
	ss, err := b.server.Connect(ctx, &mcp.IOTransport{
		Reader: struct {
			io.Reader
			io.Closer
		}{br, conn},
		Writer: conn,
	}, nil)
	if err != nil {
		return fmt.Errorf("tool relay session: %w", err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ss.Close()
		return nil
	}
	b.sessions[ss] = true
	b.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ss.Close() })
	err = ss.Wait()
	stop()
	b.mu.Lock()
	delete(b.sessions, ss)
	delete(b.listed, ss)
	b.mu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
		return fmt.Errorf("tool relay session: %w", err)
	}
	return nil
}

// hello reads and checks the first line within helloTimeout, answers it,
// and returns the binding it names.
func (r *Relay) hello(ctx context.Context, conn io.ReadWriteCloser, br *bufio.Reader) (*Binding, error) {
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	// Closing the connection is the one way to interrupt a Read on any
	// stream; a client that sends nothing cannot hold the goroutine.
	stop := context.AfterFunc(hctx, func() { conn.Close() })
	line, err := readLine(br, maxHello)
	if !stop() {
		return nil, fmt.Errorf("tool relay hello: %w", context.Cause(hctx))
	}
	if err != nil {
		return nil, fmt.Errorf("tool relay hello: %w", err)
	}
	b, reason := r.authenticate(line)
	if b == nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "tool relay refused a connection", slog.String(logkey.Reason, reason))
		io.WriteString(conn, "ERR unauthorized\n")
		return nil, fmt.Errorf("%w: %s", ErrUnauthorized, reason)
	}
	if _, err := io.WriteString(conn, helloOK); err != nil {
		return nil, fmt.Errorf("tool relay hello: %w", err)
	}
	return b, nil
}

// authenticate returns the binding a hello line names, or nil and why
// not. The reason never contains the secret.
func (r *Relay) authenticate(line string) (*Binding, string) {
	token, ok := strings.CutPrefix(line, helloPrefix)
	if !ok {
		return nil, "malformed hello"
	}
	id, secret, ok := strings.Cut(token, ".")
	if !ok || id == "" {
		return nil, "malformed token"
	}
	r.mu.Lock()
	b := r.bindings[id]
	r.mu.Unlock()
	if b == nil {
		return nil, "unknown or closed binding"
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(b.secret)) != 1 {
		return nil, "wrong secret for binding " + id
	}
	return b, ""
}

// readLine reads one \n-terminated line of at most max bytes, without
// the newline.
func readLine(br *bufio.Reader, max int) (string, error) {
	var sb strings.Builder
	for sb.Len() <= max {
		c, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return strings.TrimSuffix(sb.String(), "\r"), nil
		}
		sb.WriteByte(c)
	}
	return "", errors.New("line too long")
}
