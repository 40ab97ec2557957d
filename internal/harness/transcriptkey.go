package harness

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
)

// The names harnesses give their per-working-directory transcript
// directories, as their own code computes them.

// claudeKeyMax is the length beyond which Claude Code shortens a key and
// appends a hash.
const claudeKeyMax = 200

// ClaudeProjectKey is Claude Code's ~/.claude/projects/<key> for cwd: every
// UTF-16 code unit that is not an ASCII letter or digit becomes "-", and a
// key longer than 200 is cut there with "-" and the base-36 absolute value
// of the 32-bit Java-style string hash of cwd appended (the function
// beside `replace(/[^a-zA-Z0-9]/g,"-")` in claude-agent-sdk's cli).
func ClaudeProjectKey(cwd string) string {
	units := utf16.Encode([]rune(cwd))
	var b strings.Builder
	b.Grow(len(units))
	var h int32
	for _, u := range units {
		h = h*31 + int32(u) // (h<<5)-h+c|0
		if u < 0x80 && (u >= 'a' && u <= 'z' || u >= 'A' && u <= 'Z' || u >= '0' && u <= '9') {
			b.WriteByte(byte(u))
		} else {
			b.WriteByte('-')
		}
	}
	key := b.String()
	if len(key) <= claudeKeyMax {
		return key
	}
	abs := int64(h)
	if abs < 0 {
		abs = -abs
	}
	return key[:claudeKeyMax] + "-" + strconv.FormatInt(abs, 36)
}

// PiSessionKey is pi-coding-agent's ~/.pi/agent/sessions/<key> for cwd
// (getDefaultSessionDir): one leading slash dropped, every other slash,
// backslash and colon "-", the whole between "--" and "--".
func PiSessionKey(cwd string) string {
	if strings.HasPrefix(cwd, "/") || strings.HasPrefix(cwd, `\`) {
		cwd = cwd[1:]
	}
	return "--" + strings.NewReplacer("/", "-", `\`, "-", ":", "-").Replace(cwd) + "--"
}

// PiSessionHeader moves a Pi session file's header line
// ({"type":"session",…,"cwd":…}) from one working directory to another:
// pi exits ("Stored session working directory does not exist") when the
// header's cwd is missing.
func PiSessionHeader(line []byte, from, to string) []byte {
	body, nl := bytes.CutSuffix(line, []byte("\n"))
	var h map[string]json.RawMessage
	if json.Unmarshal(body, &h) != nil {
		return line
	}
	var typ, cwd string
	if json.Unmarshal(h["type"], &typ) != nil || typ != "session" || json.Unmarshal(h["cwd"], &cwd) != nil || cwd != from {
		return line
	}
	h["cwd"], _ = json.Marshal(to)
	out, err := json.Marshal(h)
	if err != nil {
		return line
	}
	if nl {
		out = append(out, '\n')
	}
	return out
}
