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

// legacyFields are the retired flat credential fields (docs/contract.md, The request).
var legacyFields = []string{"secrets", "provider", "deployment", "credentialMode", "endpoint"}

// withLegacy is a Request plus the retired fields, so that one decoding
// pass both fills the request and spots them.
type withLegacy struct {
	Request
	Secrets        json.RawMessage `json:"secrets"`
	Provider       json.RawMessage `json:"provider"`
	Deployment     json.RawMessage `json:"deployment"`
	CredentialMode json.RawMessage `json:"credentialMode"`
	Endpoint       json.RawMessage `json:"endpoint"`
}

// exactLegacy lists the retired fields body has under their exact names,
// looked for only when the one pass saw one.
func exactLegacy(body []byte, seen bool) []string {
	if !seen {
		return nil
	}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(body, &top)
	var out []string
	for _, f := range legacyFields {
		if _, ok := top[f]; ok {
			out = append(out, f)
		}
	}
	return out
}

func (w *withLegacy) seenLegacy() bool {
	return w.Secrets != nil || w.Provider != nil || w.Deployment != nil || w.CredentialMode != nil || w.Endpoint != nil
}

// Decode parses a run request. Every error is classed errdefs.ErrInvalid
// and names the field to fix. Unknown fields are tolerated, as the
// reference contract does; retired credential fields are refused. The
// history it carries grows every turn: decodeFast reads it by hand, and
// the one-pass parse takes whatever it leaves.
func Decode(body []byte) (*Request, error) { return (*HistoryCache)(nil).Decode(body) }

// Decode is wire.Decode with the histories of earlier requests at hand:
// the messages a request repeats are taken from the cache, not decoded
// again. A nil cache is none.
func (cache *HistoryCache) Decode(body []byte) (*Request, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errdefs.Invalidf("Invalid JSON: empty body; send a run request object")
	}
	req, ok := decodeFast(body, cache)
	if !ok {
		var err error
		if req, err = parse(body); err != nil {
			return nil, err
		}
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// parse decodes a trimmed, non-empty body without validating it.
func parse(body []byte) (*Request, error) {
	if body[0] != '{' {
		// Not an object: refused as a map would refuse it (null passes).
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			return nil, errdefs.Invalidf("Invalid JSON: %s", describe(err))
		}
	}
	var in withLegacy
	dec := json.NewDecoder(bytes.NewReader(body))
	err := dec.Decode(&in)
	var te *json.UnmarshalTypeError
	if err == nil || errors.As(err, &te) {
		// A type error ends decoding of that value only; the decoder is
		// past the object either way.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			return nil, invalidJSON(body, errors.New("unexpected data after the request object"))
		}
	}
	if err != nil && te == nil {
		return nil, invalidJSON(body, err)
	}
	// The retired fields are reported before type errors. The struct
	// matched their names case-insensitively; only exact ones count.
	if legacy := exactLegacy(body, in.seenLegacy()); len(legacy) > 0 {
		return nil, errdefs.Invalidf("Legacy top-level model credential fields are not supported (%s); send them inside modelConnection", strings.Join(legacy, ", "))
	}
	if te != nil {
		te.Field = strings.TrimPrefix(te.Field, "Request.")
		return nil, errdefs.Invalidf("Invalid JSON: %s", describe(te))
	}
	return &in.Request, nil
}

// invalidJSON is the error for a body that is not valid JSON, in the words
// of a whole-body parse (err, non-nil, when that finds nothing).
func invalidJSON(body []byte, err error) error {
	var top map[string]json.RawMessage
	if uerr := json.Unmarshal(body, &top); uerr != nil {
		err = uerr
	}
	return errdefs.Invalidf("Invalid JSON: %s", describe(err))
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
		if c := &r.Messages[i].Content; c.Blocks == nil && !c.IsText {
			// Absent content is empty text. (Written only when it was
			// absent: cached messages are shared, and read-only.)
			c.IsText = true
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
