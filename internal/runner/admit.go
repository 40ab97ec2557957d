package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/permission"
	"github.com/agentrunner/runner/internal/tools"
	"github.com/agentrunner/runner/internal/wire"
)

// plan is an admitted request: everything the turn needs, resolved before
// any sandbox, directory or secret exists.
type plan struct {
	req      *wire.Request
	harness  harness
	provider string
	env      map[string]string // materialised model environment
	tail     []json.RawMessage // the prompt: the tail user message as ACP blocks
	tailText string
	history  []wire.Message // messages before the tail
	network  string
	allow    []string

	perms     permission.Plan
	decisions *permission.Decisions
	// approvals are the tail's answers to paused permission requests, by
	// tool call id; approvalOnly is a tail that carries nothing else.
	approvals    map[string]bool
	approvalOnly bool
	// tokens maps an approval's interactionToken to its tool call id.
	tokens map[string]string
	// attachments are the tail's attachment blocks (attach.go).
	attachments []wire.ContentBlock
	// clientResults are the browser's outputs for client tool calls
	// (clienttools.go).
	clientResults *clientResults
	// renders are the tools' render hints (render.go).
	renders *renders
}

// admit checks a request against the deployment and builds its plan, its
// look-ups bounded by ctx (the request's). Every refusal names the field
// to fix; nothing is created before it passes.
func (s *Service) admit(ctx context.Context, req *wire.Request) (*plan, error) {
	p := &plan{req: req}
	name := req.Harness
	if name == "" {
		name = "pi_core"
	}
	h, ok := s.harnesses[name]
	if !ok {
		return nil, errdefs.Unprocessablef("harness: unknown harness %q (configured: %s); add one with AGENTA_RUNNER_HARNESS_%s=\"<command line>\"",
			name, strings.Join(s.harnessNames(), ", "), strings.ToUpper(name))
	}
	p.harness = h

	p.provider = req.Sandbox
	if p.provider == "" {
		p.provider = s.cfg.DefaultProvider
	}
	if _, ok := s.providers[p.provider]; !ok {
		return nil, errdefs.Unprocessablef("sandbox: Sandbox provider '%s' is not enabled on this deployment (enabled: %s)", p.provider, strings.Join(s.providerNames(), ", "))
	}

	env, err := materialize(req.ModelConnection)
	if err != nil {
		return nil, err
	}
	p.env = env
	if msg := s.cfg.SecretRefusal[p.provider]; msg != "" && s.unhideable(req) {
		return nil, errdefs.Unprocessablef("%s", msg)
	}

	if err := s.admitNetwork(p); err != nil {
		return nil, err
	}
	if err := s.admitTools(ctx, req); err != nil {
		return nil, err
	}
	if err := admitMessages(p); err != nil {
		return nil, err
	}
	p.decisions = permission.ParseDecisions(req.Messages)
	p.perms = permission.New(req.Permissions, req.CustomTools, req.MCPServers)
	if s.cfg.DenyAllPermissions {
		p.perms = permission.DenyAll()
	}
	if p.network == "allowlist" {
		p.allow = append(p.allow, mcpHosts(req.MCPServers)...)
	}
	if err := s.checkTools(p); err != nil {
		return nil, err
	}
	return p, nil
}

// admitNetwork checks the request's sandbox permissions and its model
// endpoint, and sets the sandbox's network from them.
func (s *Service) admitNetwork(p *plan) error {
	req := p.req
	if sp := req.SandboxPermission; sp != nil {
		if sp.Network != nil {
			switch sp.Network.Mode {
			case "", "on", "off", "allowlist":
				p.network = sp.Network.Mode
				p.allow = sp.Network.Allowlist
			default:
				return errdefs.Invalidf("sandboxPermission.network.mode: %q is not one of on, off, allowlist", sp.Network.Mode)
			}
			if p.network != "allowlist" && len(sp.Network.Allowlist) > 0 {
				return errdefs.Invalidf("sandboxPermission.network.allowlist is only valid with mode \"allowlist\"")
			}
			if err := s.checkAllowlist(sp.Network.Allowlist); err != nil {
				return err
			}
		}
		switch sp.Filesystem {
		case "", "on", "readonly":
		default:
			return errdefs.Invalidf("sandboxPermission.filesystem: %q is not one of on, readonly", sp.Filesystem)
		}
	}
	if mc := req.ModelConnection; mc != nil && mc.Endpoint != nil && mc.Endpoint.BaseURL != "" {
		open, err := s.admitEndpoint(p.provider, mc)
		if err != nil {
			return err
		}
		if open != "" && p.network != "off" {
			// Under "on" too: a local sandbox's isolated network refuses
			// private addresses unless the operator opened them.
			p.allow = append(p.allow, open)
		}
	}
	return nil
}

// admitTools checks the harness files, custom tools and MCP servers the
// request brings.
func (s *Service) admitTools(ctx context.Context, req *wire.Request) error {
	for i, f := range req.HarnessFiles {
		if err := checkRelPath(f.Path); err != nil {
			return errdefs.Invalidf("harnessFiles[%d].path: %v", i, err)
		}
	}
	for i, t := range req.CustomTools {
		if t.Kind == "code" {
			return errdefs.Invalidf("customTools[%d] (%s): Code tools are not supported by the sidecar", i, t.Name)
		}
	}
	for i, m := range req.MCPServers {
		if m.Name == "agenta-tools" {
			return errdefs.Invalidf("mcpServers[%d].name: \"agenta-tools\" is reserved for the runner's own tools", i)
		}
		// The harness dials these from inside the sandbox; admission is
		// the one place the runner can refuse an internal address.
		if err := tools.CheckMCPServer(ctx, s.cfg.Tools.Base, m.Connection.URL); err != nil {
			return fmt.Errorf("mcpServers[%d].connection.url: %w", i, err)
		}
	}
	return nil
}

// admitMessages checks the conversation and plans its tail: the prompt,
// or the approvals and client tool results it answers with.
func admitMessages(p *plan) error {
	req := p.req
	if len(req.Messages) == 0 {
		return errdefs.Invalidf("messages: No user message to send (prompt/messages empty)")
	}
	tail := req.Messages[len(req.Messages)-1]
	var blocks []json.RawMessage
	var text string
	if tail.Role == "user" {
		var err error
		if blocks, text, err = promptBlocks(tail); err != nil {
			return err
		}
	} else if !carriesApproval(tail) && !carriesToolResult(tail) {
		// The web app resumes an approval (or returns a client tool's
		// result) on an assistant tail; anything else must end with the
		// user's turn.
		return errdefs.Invalidf("messages: No user message to send (prompt/messages empty): the last message has role %q and answers no approval (a tool_result {\"approved\": bool}) or client tool; end the conversation with a user message", tail.Role)
	}
	p.approvals = approvalsOf(tail)
	p.tokens = interactionTokens(tail)
	p.attachments = attachmentsOf(tail)
	if err := checkAttachments(p.attachments); err != nil {
		return err
	}
	p.clientResults = clientResultsOf(req.Messages)
	p.renders = newRenders(req.CustomTools)
	if len(blocks) == 0 && len(p.attachments) == 0 {
		if len(p.approvals) == 0 && !carriesToolResult(tail) {
			return errdefs.Invalidf("messages: No user message to send (prompt/messages empty)")
		}
		p.approvalOnly = true
	}
	p.tail, p.tailText = blocks, text
	p.history = req.Messages[:len(req.Messages)-1]
	return nil
}

// admitEndpoint refuses a model endpoint on a refused range (the host's
// loopback or networks, the metadata endpoint, the runner itself) unless
// the operator opened it: the key gateway would dial it on the host, or
// the sandbox would be opened to it. It returns what the sandbox must
// reach when the harness dials the endpoint itself (local_use
// credentials, no key gateway): its host:port only, never every port ("" when
// the gateway carries the model traffic, and the sandbox needs only the
// gateway).
func (s *Service) admitEndpoint(provider string, mc *wire.ModelConnection) (string, error) {
	u, err := url.Parse(mc.Endpoint.BaseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", errdefs.Invalidf("modelConnection.endpoint.baseUrl: not an absolute http(s) URL")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil || pn == 0 {
		return "", errdefs.Invalidf("modelConnection.endpoint.baseUrl: bad port %q", port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.cfg.Egress.CheckHost(ctx, u.Hostname(), uint16(pn)); err != nil {
		return "", errdefs.With(errdefs.ErrInvalid, fmt.Errorf("modelConnection.endpoint.baseUrl: %w", err))
	}
	if s.gatewayCarries(mc) {
		return "", nil
	}
	if !s.sharesHost(provider) {
		// A remote provider filters by host, not port (Daytona), and its
		// network is not the runner host's.
		return u.Hostname(), nil
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// gatewayCarries reports whether the key gateway carries the model
// traffic: the harness is given the gateway's base URL (hideKeys).
func (s *Service) gatewayCarries(mc *wire.ModelConnection) bool {
	if s.cfg.Gateway == nil {
		return false
	}
	for _, c := range mc.Credentials {
		if c.Usage == "opaque_http" {
			return true
		}
	}
	return false
}

// checkAllowlist refuses allowlist entries that could open nothing but
// refused space (127.0.0.1/32, 169.254.169.254, localhost:5432), so the
// client learns why and what to change; a range that only overlaps it
// (0.0.0.0/0) means the internet, and dials are checked again.
func (s *Service) checkAllowlist(entries []string) error {
	for i, e := range entries {
		e = strings.TrimSpace(e)
		if strings.Contains(e, "://") {
			if u, err := url.Parse(e); err == nil {
				e = u.Host
			}
		}
		host, port := e, 0
		if h, ps, err := net.SplitHostPort(e); err == nil {
			host = h
			port, _ = strconv.Atoi(ps)
		}
		host = strings.Trim(host, "[]")
		var pr netip.Prefix
		if p, err := netip.ParsePrefix(host); err == nil {
			pr = p
		} else if a, err := netip.ParseAddr(host); err == nil {
			pr = netip.PrefixFrom(a, a.BitLen())
		} else if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
			pr = netip.MustParsePrefix("127.0.0.1/32")
		} else {
			continue // a name: checked at dial time on what it resolves to
		}
		var err error
		if port > 0 && port <= 65535 && pr.IsSingleIP() {
			err = s.cfg.Egress.Check(netip.AddrPortFrom(pr.Addr(), uint16(port)))
		} else {
			err = s.cfg.Egress.CheckPrefix(pr)
		}
		if err != nil {
			return errdefs.With(errdefs.ErrInvalid, fmt.Errorf("sandboxPermission.network.allowlist[%d] %q: %w", i, entries[i], err))
		}
	}
	return nil
}

// Request paths are capped well inside the kernel's own limits (NAME_MAX
// 255, PATH_MAX 4096), leaving room for the working directory they are
// joined to: a longer one would fail only when written, as a 500.
const (
	maxRelPath     = 1024
	maxPathSegment = 255
)

// checkRelPath refuses paths that would land outside the working directory,
// and paths or components longer than the limits above.
func checkRelPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case len(p) > maxRelPath:
		return fmt.Errorf("%.40q… is %d bytes long; give a path of at most %d bytes", p, len(p), maxRelPath)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute; give a path relative to the working directory", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%q contains a NUL byte", p)
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return fmt.Errorf("%q escapes the working directory", p)
	}
	for _, seg := range strings.Split(clean, "/") {
		if len(seg) > maxPathSegment {
			return fmt.Errorf("%.40q… has a component of %d bytes; give components of at most %d bytes", p, len(seg), maxPathSegment)
		}
	}
	return nil
}
