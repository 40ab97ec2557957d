package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
)

// legacyFields are the retired flat credential fields (reference 2.7).
var legacyFields = []string{"secrets", "provider", "deployment", "credentialMode", "endpoint"}

// Decode parses a run request. Every error is classed errdefs.ErrInvalid
// and names the field to fix. Unknown fields are tolerated, as the
// reference contract does; retired credential fields are refused.
func Decode(body []byte) (*Request, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errdefs.Invalidf("Invalid JSON: empty body; send a run request object")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, errdefs.Invalidf("Invalid JSON: %s", describe(err))
	}
	var legacy []string
	for _, f := range legacyFields {
		if _, ok := top[f]; ok {
			legacy = append(legacy, f)
		}
	}
	if len(legacy) > 0 {
		return nil, errdefs.Invalidf("Legacy top-level model credential fields are not supported (%s); send them inside modelConnection", strings.Join(legacy, ", "))
	}
	var req Request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, errdefs.Invalidf("Invalid JSON: %s", describe(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errdefs.Invalidf("Invalid JSON: unexpected data after the request object")
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

func describe(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "request"
		}
		return fmt.Sprintf("%s: expected %s, got JSON %s", field, te.Type.String(), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("at byte %d: %s", se.Offset, se.Error())
	}
	return err.Error()
}

// validate checks the shape of fields the JSON types cannot.
func (r *Request) validate() error {
	for i := range r.Messages {
		if c := &r.Messages[i].Content; c.Blocks == nil {
			c.IsText = true // absent content is empty text
		}
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "user", "assistant", "system", "tool":
		default:
			return errdefs.Invalidf("messages[%d].role: %q is not one of user, assistant, system, tool", i, m.Role)
		}
	}
	for i, t := range r.CustomTools {
		if strings.TrimSpace(t.Name) == "" {
			return errdefs.Invalidf("customTools[%d].name: required", i)
		}
	}
	for i, m := range r.MCPServers {
		if strings.TrimSpace(m.Name) == "" {
			return errdefs.Invalidf("mcpServers[%d].name: required", i)
		}
		if m.Connection.Type != "http" {
			return errdefs.Invalidf("mcpServers[%d].connection.type: %q; only \"http\" MCP servers are supported", i, m.Connection.Type)
		}
		if !strings.HasPrefix(m.Connection.URL, "https://") && !strings.HasPrefix(m.Connection.URL, "http://") {
			return errdefs.Invalidf("mcpServers[%d].connection.url: %q is not an http(s) URL", i, m.Connection.URL)
		}
	}
	if p := r.Permissions; p != nil {
		if !oneOf(p.Default, "", "allow", "ask", "deny", "allow_reads") {
			return errdefs.Invalidf("permissions.default: %q is not one of allow, ask, deny, allow_reads", p.Default)
		}
		for i, rule := range p.Rules {
			if strings.TrimSpace(rule.Pattern) == "" {
				return errdefs.Invalidf("permissions.rules[%d].pattern: required", i)
			}
			if !oneOf(rule.Permission, "allow", "ask", "deny") {
				return errdefs.Invalidf("permissions.rules[%d].permission: %q is not one of allow, ask, deny", i, rule.Permission)
			}
		}
	}
	if r.HarnessMode != "" && !oneOf(r.HarnessMode, "agent", "read-only", "agent-full-access") {
		return errdefs.Invalidf("harnessMode: %q is not one of agent, read-only, agent-full-access", r.HarnessMode)
	}
	return nil
}

func oneOf(s string, options ...string) bool {
	for _, o := range options {
		if s == o {
			return true
		}
	}
	return false
}
