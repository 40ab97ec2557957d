package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
)

// directCall is a spec's `call` descriptor (docs/contract.md, Tools): the runner
// calls an endpoint of the platform's own API directly instead of the
// /tools/call gateway.
type directCall struct {
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Body     json.RawMessage   `json:"body,omitempty"` // decoded per call: bindings write into it
	Context  map[string]string `json:"context,omitempty"`
	ArgsInto string            `json:"args_into,omitempty"`
}

var directMethods = map[string]bool{"GET": true, "POST": true, "PUT": true, "DELETE": true}

// pathParam matches a {name} path parameter; names may be dotted.
var pathParam = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_.-]*)\}`)

const ctxPrefix = "$ctx."

// parseDirect reads and checks a descriptor at New, so a malformed one
// fails the turn instead of every call.
func parseDirect(name string, raw json.RawMessage) (*directCall, error) {
	var dc directCall
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&dc); err != nil {
		return nil, errdefs.Invalidf("tool %q: call: %v", name, err)
	}
	if !directMethods[dc.Method] {
		return nil, errdefs.Invalidf("tool %q: call.method %q is not allowed (GET, POST, PUT, DELETE)", name, dc.Method)
	}
	if err := checkPath(dc.Path); err != nil {
		return nil, errdefs.Invalidf("tool %q: call.path: %v", name, err)
	}
	for p, tok := range dc.Context {
		if err := checkDotted(p); err != nil {
			return nil, errdefs.Invalidf("tool %q: call.context %q: %v", name, p, err)
		}
		if !strings.HasPrefix(tok, ctxPrefix) {
			return nil, errdefs.Invalidf("tool %q: call.context %q: value %q must start with %s", name, p, tok, ctxPrefix)
		}
	}
	if len(dc.Body) > 0 && string(dc.Body) != "null" {
		if _, err := decodeObject(dc.Body); err != nil {
			return nil, errdefs.Invalidf("tool %q: call.body: %v", name, err)
		}
	}
	if dc.ArgsInto != "" {
		if err := checkDotted(dc.ArgsInto); err != nil {
			return nil, errdefs.Invalidf("tool %q: call.args_into: %v", name, err)
		}
	}
	return &dc, nil
}

// checkPath accepts a single absolute path: one leading slash, no
// traversal, no backslash, no whitespace.
func checkPath(p string) error {
	if len(p) == 0 || p[0] != '/' || strings.HasPrefix(p, "//") {
		return fmt.Errorf("%q must be an absolute path starting with a single /", p)
	}
	if strings.Contains(p, "..") || strings.ContainsAny(p, "\\ \t\r\n") {
		return fmt.Errorf("%q is not a safe path", p)
	}
	return nil
}

// unsafeKeys could pollute a JavaScript prototype; the platform's other
// runners refuse them, so paths that use them are refused here too.
var unsafeKeys = map[string]bool{"__proto__": true, "constructor": true, "prototype": true}

func checkDotted(path string) error {
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			return fmt.Errorf("empty segment in path %q", path)
		}
		if unsafeKeys[part] {
			return fmt.Errorf("unsafe segment %q in path %q", part, path)
		}
	}
	return nil
}

// decodeObject decodes a JSON object, keeping numbers as written.
func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// parseBindings reads contextBindings: {argPath: "$ctx.dotted.path"}.
func parseBindings(name string, raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var b map[string]string
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, errdefs.Invalidf("tool %q: contextBindings: %v", name, err)
	}
	for p, tok := range b {
		if err := checkDotted(p); err != nil {
			return nil, errdefs.Invalidf("tool %q: contextBindings %q: %v", name, p, err)
		}
		if !strings.HasPrefix(tok, ctxPrefix) {
			return nil, errdefs.Invalidf("tool %q: contextBindings %q: value %q must start with %s", name, p, tok, ctxPrefix)
		}
	}
	return b, nil
}

func deepGet(v any, path string) (any, bool) {
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok || part == "" || unsafeKeys[part] {
			return nil, false
		}
		if v, ok = m[part]; !ok {
			return nil, false
		}
	}
	return v, true
}

func deepSet(m map[string]any, path string, v any) error {
	if err := checkDotted(path); err != nil {
		return err
	}
	parts := strings.Split(path, ".")
	for _, part := range parts[:len(parts)-1] {
		next, ok := m[part].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[part] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
	return nil
}

func deepDelete(m map[string]any, path string) {
	parts := strings.Split(path, ".")
	for _, part := range parts[:len(parts)-1] {
		next, ok := m[part].(map[string]any)
		if !ok {
			return
		}
		m = next
	}
	delete(m, parts[len(parts)-1])
}

// deepMerge overlays o on b; o wins, except that two objects merge.
func deepMerge(b, o map[string]any) map[string]any {
	out := make(map[string]any, len(b)+len(o))
	for k, v := range b {
		out[k] = v
	}
	for k, v := range o {
		if unsafeKeys[k] {
			continue
		}
		om, ok1 := v.(map[string]any)
		bm, ok2 := out[k].(map[string]any)
		if ok1 && ok2 {
			out[k] = deepMerge(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

// bind sets each bound path of m to its run-context value, replacing
// whatever the model put there. A binding that does not resolve fails
// the call, naming it: a self-targeting tool must never silently lose
// its hidden target.
func (s *Set) bind(m map[string]any, bindings map[string]string, what string) error {
	for p, tok := range bindings {
		deepDelete(m, p)
		path, ok := strings.CutPrefix(tok, ctxPrefix)
		var v any
		if ok {
			v, ok = deepGet(s.runCtx, path)
		}
		if !ok {
			return fmt.Errorf("missing run-context value for %s binding %q", what, p)
		}
		if err := deepSet(m, p, v); err != nil {
			return err
		}
	}
	return nil
}

// directRequest resolves a descriptor for one call: the URL, locked to
// the callback endpoint's origin and API mount, and the body.
func (s *Set) directRequest(dc *directCall, args map[string]any) (string, []byte, error) {
	var perr error
	path := pathParam.ReplaceAllStringFunc(dc.Path, func(tok string) string {
		name := tok[1 : len(tok)-1]
		v, ok := deepGet(args, name)
		if !ok || v == nil {
			perr = errors.Join(perr, fmt.Errorf("path parameter {%s} is missing", name))
			return ""
		}
		switch v.(type) {
		case string, json.Number, bool:
		default:
			perr = errors.Join(perr, fmt.Errorf("path parameter {%s} must be a scalar", name))
			return ""
		}
		return url.PathEscape(fmt.Sprint(v))
	})
	if perr != nil {
		return "", nil, perr
	}
	if err := checkPath(path); err != nil {
		return "", nil, err
	}
	base, _ := url.Parse(s.endpoint) // parsed in New
	u, err := url.Parse(base.Scheme + "://" + base.Host + path)
	if err != nil || u.Host != base.Host || u.Scheme != base.Scheme {
		return "", nil, fmt.Errorf("path %q leaves the callback origin", path)
	}
	// Escaped dots decode to traversal on the server; refuse them too.
	if strings.Contains(u.Path, "..") {
		return "", nil, fmt.Errorf("path %q is not a safe path", path)
	}
	mount, isAPI := strings.CutSuffix(base.Path, "/tools/call")
	if isAPI && mount != "" && u.Path != mount && !strings.HasPrefix(u.Path, mount+"/") {
		return "", nil, fmt.Errorf("path %q is outside the API mount %q", path, mount)
	}
	if dc.Method == "GET" || dc.Method == "DELETE" {
		return u.String(), nil, nil
	}
	// Identifiers that went into the route stay out of the body.
	for _, m := range pathParam.FindAllStringSubmatch(dc.Path, -1) {
		deepDelete(args, m[1])
	}
	body := map[string]any{}
	if dc.ArgsInto != "" {
		if err := deepSet(body, dc.ArgsInto, args); err != nil {
			return "", nil, err
		}
	} else {
		body = args
	}
	if len(dc.Body) > 0 && string(dc.Body) != "null" {
		fixed, err := decodeObject(dc.Body)
		if err != nil {
			return "", nil, err
		}
		body = deepMerge(body, fixed)
	}
	if err := s.bind(body, dc.Context, "direct-call"); err != nil {
		return "", nil, err
	}
	b, err := json.Marshal(body)
	return u.String(), b, err
}
