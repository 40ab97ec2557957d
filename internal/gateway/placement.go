package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// Placement is one place a request may carry a credential: a header
// whose value is Prefix and the key ("Bearer <key>"), or a query
// parameter whose value is the key. The gateway swaps a placeholder for
// its key only there, in exactly that form: anywhere else an upstream
// could echo it (a FastAPI 422 repeats bad query values), so a
// placeholder anywhere else is refused instead.
type Placement struct {
	Header string // canonical header name, e.g. "X-Api-Key"
	Prefix string // an auth scheme with its space, e.g. "Bearer "; matched case-insensitively
	Query  string // a query parameter name, e.g. "key"
}

// The placements of the provider wire protocols (a harness's SDK sends
// one of them).
var (
	BearerAuth   = Placement{Header: "Authorization", Prefix: "Bearer "} // OpenAI-compatible APIs, Anthropic auth tokens
	AnthropicKey = Placement{Header: "X-Api-Key"}                        // Anthropic Messages
	GoogleKey    = Placement{Header: "X-Goog-Api-Key"}                   // Gemini
	GoogleQuery  = Placement{Query: "key"}                               // Gemini's ?key=
	AzureKey     = Placement{Header: "Api-Key"}                          // Azure OpenAI
)

func (p Placement) String() string {
	switch {
	case p.Query != "":
		return "query parameter " + p.Query
	case p.Prefix != "":
		return "header " + p.Header + " (" + p.Prefix + "<key>)"
	}
	return "header " + p.Header
}

// Credential is a key to keep out of the sandbox and the placements its
// provider's protocol carries it in.
type Credential struct {
	// Name is the variable the key is bound to; errors and audit records
	// name the credential by it, never by its value.
	Name  string
	Key   string
	Allow []Placement
}

// secret is one registered key and its placeholder.
type secret struct {
	name        string
	key         string
	placeholder string
	allow       []Placement
}

func (s *secret) allowed() string {
	var b strings.Builder
	for i, p := range s.allow {
		if i > 0 {
			b.WriteString(" or ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// misplaced is a placeholder found where its credential is not bound.
type misplaced struct {
	s     *secret
	where string
}

func (e *misplaced) Error() string {
	return fmt.Sprintf("the placeholder key of %s is in %s; the gateway substitutes it only in %s and forwards it nowhere else: send it only there",
		e.s.name, e.where, e.s.allowed())
}

// substitution is one key swapped in, for the audit.
type substitution struct {
	s     *secret
	where Placement
}

// find is the secret whose placeholder occurs in v, or nil.
func (rt *route) find(v string) *secret {
	for _, s := range rt.secrets {
		if strings.Contains(v, s.placeholder) {
			return s
		}
	}
	return nil
}

// substitute swaps each placeholder in r's headers and query for its key
// where that key is bound, and refuses a placeholder anywhere else in the
// request line or headers. It returns what it swapped in.
func (rt *route) substitute(r *http.Request) ([]substitution, *misplaced) {
	// The decoded path: percent-encoding cannot hide a placeholder from it.
	if s := rt.find(r.URL.Path); s != nil {
		return nil, &misplaced{s, "the URL path"}
	}
	var subs []substitution
	for name, vs := range r.Header {
		if s := rt.find(name); s != nil {
			return nil, &misplaced{s, "a header name"}
		}
		for i, v := range vs {
			s := rt.find(v)
			if s == nil {
				continue
			}
			p, val, ok := s.inHeader(name, v)
			if !ok {
				return nil, &misplaced{s, fmt.Sprintf("header %s", name)}
			}
			vs[i] = val
			subs = append(subs, substitution{s, p})
		}
	}
	q, qsubs, m := rt.query(r.URL.RawQuery)
	if m != nil {
		return nil, m
	}
	r.URL.RawQuery = q
	return append(subs, qsubs...), nil
}

// inHeader is v with the key in place of the placeholder when header
// name is one of s's placements and v is exactly its form.
func (s *secret) inHeader(name, v string) (Placement, string, bool) {
	name = textproto.CanonicalMIMEHeaderKey(name)
	for _, p := range s.allow {
		if p.Header != name || len(v) != len(p.Prefix)+len(s.placeholder) {
			continue
		}
		scheme, rest := v[:len(p.Prefix)], v[len(p.Prefix):]
		if strings.EqualFold(scheme, p.Prefix) && rest == s.placeholder {
			return p, scheme + s.key, true
		}
	}
	return Placement{}, "", false
}

// query rewrites a raw query, keeping its order and encoding, with keys
// in the parameters they are bound to.
func (rt *route) query(raw string) (string, []substitution, *misplaced) {
	if rt.find(raw) == nil && !strings.Contains(raw, "%") {
		return raw, nil, nil
	}
	var subs []substitution
	parts := strings.Split(raw, "&")
	for i, part := range parts {
		k, v, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k // undecodable: searched as written
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			val = v
		}
		if s := rt.find(name); s != nil {
			return "", nil, &misplaced{s, "a query parameter name"}
		}
		s := rt.find(val)
		if s == nil {
			continue
		}
		p, ok := s.inQuery(name, val)
		if !ok {
			return "", nil, &misplaced{s, fmt.Sprintf("query parameter %q", name)}
		}
		parts[i] = k + "=" + url.QueryEscape(s.key)
		subs = append(subs, substitution{s, p})
	}
	return strings.Join(parts, "&"), subs, nil
}

func (s *secret) inQuery(name, val string) (Placement, bool) {
	for _, p := range s.allow {
		if p.Query != "" && p.Query == name && val == s.placeholder {
			return p, true
		}
	}
	return Placement{}, false
}

// bodyGuard passes a request body through and fails it at the first
// placeholder: nothing in a body is ever substituted, and a placeholder
// there is as misplaced as in any other field. It holds the last bytes
// of each read so a placeholder split across reads is still seen; the
// read that completes one fails instead, so the upstream never receives
// a whole placeholder (only an aborted request).
type bodyGuard struct {
	r    io.ReadCloser
	rt   *route
	ex   *exchange
	tail []byte
	win  []byte
}

func (b *bodyGuard) Read(p []byte) (int, error) {
	if m := b.ex.refused.Load(); m != nil {
		return 0, m
	}
	n, err := b.r.Read(p)
	if n == 0 {
		return n, err
	}
	b.win = append(append(b.win[:0], b.tail...), p[:n]...)
	for _, s := range b.rt.secrets {
		if bytes.Contains(b.win, []byte(s.placeholder)) {
			m := &misplaced{s, "the request body"}
			b.ex.refused.Store(m)
			return 0, m
		}
	}
	// A route may hide no key at all (its credentials were empty): then
	// there is no placeholder to look for and nothing to hold back.
	keep := max(0, min(len(b.win), b.rt.longest-1))
	b.tail = append(b.tail[:0], b.win[len(b.win)-keep:]...)
	return n, err
}

func (b *bodyGuard) Close() error { return b.r.Close() }
