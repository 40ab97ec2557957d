package permission

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
)

// firstString returns the first string value of raw JSON arguments, in
// document order: the value itself for a string, the first string
// element of an array, the first string-valued member of an object.
// Document order matters (Bash's command comes first), so the arguments
// are read as tokens rather than through a map.
func firstString(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	switch t := tok.(type) {
	case string:
		return t, true
	case json.Delim:
		isObject := t == '{'
		if !isObject && t != '[' {
			return "", false
		}
		for dec.More() {
			if isObject {
				if _, err := dec.Token(); err != nil { // the member's key
					return "", false
				}
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return "", false
			}
			var s string
			if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
				return s, true
			}
		}
	}
	return "", false
}

// CallKey is the key a stored decision is found under when the call id
// is not known (a cold resume, where the harness re-issues the call with
// a new id): "<name>#<sha256 of the canonical arguments>". Absent or null
// arguments count as {}. Pi's bash is keyed on its command alone and
// Codex's MCP wrapper {server, tool, arguments} on the inner arguments,
// so the key a gate computes matches the one recorded in the transcript.
// It returns false when name is empty or the arguments are not JSON.
func CallKey(name string, args []byte) (string, bool) {
	if name == "" {
		return "", false
	}
	var v any
	if len(bytes.TrimSpace(args)) == 0 {
		v = map[string]any{}
	} else {
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return "", false
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return "", false
		}
	}
	if v == nil {
		v = map[string]any{}
	}
	v = unwrapCodex(v)
	if b, ok := piBuiltin(name); ok {
		name = b.rule
		if b.rule == "Bash" {
			if m, ok := v.(map[string]any); ok {
				if cmd, ok := m["command"]; ok {
					v = map[string]any{"command": cmd}
				}
			}
		}
	}
	var sb strings.Builder
	if err := canonical(&sb, v); err != nil {
		return "", false
	}
	sum := sha256.Sum256([]byte(sb.String()))
	return name + "#" + hex.EncodeToString(sum[:]), true
}

// unwrapCodex returns the inner arguments of codex-acp's MCP rawInput
// wrapper, exactly {server: string, tool: string, arguments: object}.
func unwrapCodex(v any) any {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 3 {
		return v
	}
	_, s := m["server"].(string)
	_, t := m["tool"].(string)
	inner, a := m["arguments"].(map[string]any)
	if s && t && a {
		return inner
	}
	return v
}

// canonical writes v as JSON with sorted object keys and numbers in one
// form (1, 1.0 and 1e0 agree), so equal arguments key equally whatever
// their spelling.
func canonical(sb *strings.Builder, v any) error {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			sb.Write(kb)
			sb.WriteByte(':')
			if err := canonical(sb, t[k]); err != nil {
				return err
			}
		}
		sb.WriteByte('}')
	case []any:
		sb.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				sb.WriteByte(',')
			}
			if err := canonical(sb, e); err != nil {
				return err
			}
		}
		sb.WriteByte(']')
	case json.Number:
		f, err := t.Float64()
		if err != nil {
			return err
		}
		b, err := json.Marshal(f)
		if err != nil {
			return err
		}
		sb.Write(b)
	default:
		b, err := json.Marshal(t)
		if err != nil {
			return err
		}
		sb.Write(b)
	}
	return nil
}

// SplitMCPName splits a harness-side MCP tool name "mcp__<server>__<tool>"
// (Claude's spelling) into its server and tool.
func SplitMCPName(name string) (server, tool string, ok bool) {
	rest, ok := strings.CutPrefix(name, "mcp__")
	if !ok {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, "__")
	if !ok || server == "" || tool == "" {
		return "", "", false
	}
	return server, tool, true
}
