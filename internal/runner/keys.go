package runner

import (
	"fmt"
	"strings"

	"github.com/agentrunner/runner/internal/gateway"
	builtin "github.com/agentrunner/runner/internal/harness" // the built-in harnesses' provider table
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/wire"
)

// hideKeys keeps the model connection's opaque_http keys out of the
// sandbox: the harness gets placeholders and a base URL on the runner's
// key gateway, which swaps the real keys in on the way out. It returns
// the environment and request the harness is configured from, and the
// route to release with the session (nil when there is nothing to hide).
func (c *coldStart) hideKeys() (map[string]string, *wire.Request, *gateway.Route, error) {
	t := c.t
	p := t.plan
	g := t.svc.cfg.Gateway
	mc := p.req.ModelConnection
	if g == nil || mc == nil || mc.Endpoint == nil || mc.Endpoint.BaseURL == "" {
		return p.env, p.req, nil, nil
	}
	var creds []gateway.Credential
	allow := placements(mc)
	for _, c := range mc.Credentials {
		if c.Usage == "opaque_http" {
			creds = append(creds, gateway.Credential{Name: c.Binding.Name, Key: c.Value, Allow: allow})
		}
	}
	if len(creds) == 0 {
		return p.env, p.req, nil, nil
	}
	register := g.Register
	if c.register != nil {
		register = c.register // a pre-warmed slot's reservation (prewarm.go)
	}
	rt, err := register(gateway.Spec{BaseURL: mc.Endpoint.BaseURL, Credentials: creds, Drop: builtin.GatewayDrop(p.harness.spec.Name),
		Log: t.svc.log.With(logkey.Session, p.req.SessionID, logkey.Project, projectOf(p.req), logkey.Provider, p.provider)})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("modelConnection.endpoint.baseUrl: %w", err)
	}
	if !t.svc.sharesHost(p.provider) {
		// A remote sandbox reaches the gateway through the in-sandbox
		// forward listening on its own loopback.
		rt.BaseURL = "http://" + t.svc.modelListen() + strings.TrimPrefix(rt.BaseURL, "http://"+g.Addr())
	}
	real := strings.TrimSuffix(mc.Endpoint.BaseURL, "/")
	base := strings.TrimSuffix(rt.BaseURL, "/")
	env := make(map[string]string, len(p.env))
	for k, v := range p.env {
		if ph, ok := rt.Placeholders[v]; ok {
			v = ph
		} else if strings.HasPrefix(v, real) {
			v = base + strings.TrimPrefix(v, real) // e.g. OPENAI_BASE_URL
		}
		env[k] = v
	}
	req := *p.req
	m := *mc
	ep := *mc.Endpoint
	ep.BaseURL = rt.BaseURL
	m.Endpoint = &ep
	m.Credentials = make([]wire.Credential, len(mc.Credentials))
	for i, c := range mc.Credentials {
		if ph, ok := rt.Placeholders[c.Value]; ok {
			c.Value = ph
		}
		m.Credentials[i] = c
	}
	if len(mc.Environment) > 0 {
		m.Environment = map[string]string{}
		for k, v := range mc.Environment {
			m.Environment[k] = env[k]
			if m.Environment[k] == "" {
				m.Environment[k] = v
			}
		}
	}
	req.ModelConnection = &m
	return env, &req, &rt, nil
}

// placements is where the connection's wire protocol carries its key,
// the only places the gateway swaps it in. Anthropic's protocol has two
// documented ones: x-api-key for an API key (ANTHROPIC_API_KEY) and
// "Authorization: Bearer" for an auth token (ANTHROPIC_AUTH_TOKEN), which
// Anthropic-compatible gateways (LiteLLM) take too, and which harness
// sends which depends on the variable it reads, not on the binding: both
// are allowed, both being auth headers an upstream does not echo. Gemini
// takes x-goog-api-key or ?key=; Azure api-key; every other provider is
// OpenAI-compatible, Bearer only.
func placements(mc *wire.ModelConnection) []gateway.Placement {
	provider := strings.ToLower(strings.TrimSpace(mc.Provider))
	if strings.EqualFold(mc.Deployment, "azure") || strings.HasPrefix(provider, "azure") {
		return []gateway.Placement{gateway.AzureKey}
	}
	switch builtin.ProviderAPIs(provider, mc.Endpoint.BaseURL)[0] {
	case builtin.Anthropic:
		return []gateway.Placement{gateway.AnthropicKey, gateway.BearerAuth}
	case builtin.Gemini:
		return []gateway.Placement{gateway.GoogleKey, gateway.GoogleQuery}
	}
	return []gateway.Placement{gateway.BearerAuth}
}

// sharesHost reports whether the provider's sandboxes reach the runner's
// loopback (the key gateway listens there).
func (s *Service) sharesHost(provider string) bool {
	b, ok := s.providers[provider].(interface{ CanBind() bool })
	return ok && b.CanBind()
}

// modelListen is where the in-sandbox model forward listens.
func (s *Service) modelListen() string {
	if s.cfg.ModelForwardAddr != "" {
		return s.cfg.ModelForwardAddr
	}
	return "127.0.0.1:47811"
}

// unhideable reports whether the request carries credentials the runner
// cannot keep out of a sandbox: user MCP server credentials (sent by the
// harness itself), local_use model credentials (used by an SDK inside),
// and opaque_http ones when the key gateway is off.
func (s *Service) unhideable(r *wire.Request) bool {
	for _, m := range r.MCPServers {
		if len(m.Connection.Credentials) > 0 {
			return true
		}
	}
	mc := r.ModelConnection
	if mc == nil {
		return false
	}
	for _, c := range mc.Credentials {
		if c.Usage != "opaque_http" || s.cfg.Gateway == nil || mc.Endpoint == nil || mc.Endpoint.BaseURL == "" {
			return true
		}
	}
	return false
}
