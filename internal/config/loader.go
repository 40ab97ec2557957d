package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// loader reads variables and collects problems instead of stopping at the
// first one.
type loader struct {
	environ  []string
	env      map[string]string
	set      map[string]bool
	errs     []error
	warnings []string
}

func newLoader(environ []string) *loader {
	l := &loader{environ: environ, env: map[string]string{}, set: map[string]bool{}}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		l.set[k] = true
		// Empty or whitespace counts as unset (compose renders ${X:-}).
		if strings.TrimSpace(v) != "" {
			l.env[k] = strings.TrimSpace(v)
		}
	}
	return l
}

func (l *loader) get(k string) string { return l.env[k] }
func (l *loader) isSet(k string) bool { return l.set[k] }

func (l *loader) fail(msg string) { l.errs = append(l.errs, fmt.Errorf("%s", msg)) }
func (l *loader) warn(msg string) { l.warnings = append(l.warnings, msg) }

func (l *loader) str(k, def string) string {
	if v, ok := l.env[k]; ok {
		return v
	}
	return def
}

func (l *loader) first(keys ...string) string {
	for _, k := range keys {
		if v, ok := l.env[k]; ok {
			return v
		}
	}
	return ""
}

// strictInt is for values a typo must not silently change (ports, limits).
func (l *loader) strictInt(k string, def, lo, hi int) int {
	v, ok := l.env[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		l.fail(fmt.Sprintf("%s=%q: want an integer from %d to %d", k, v, lo, hi))
		return def
	}
	return n
}

// limit is a resource limit: 0 means none, otherwise at least lo.
func (l *loader) limit(k string, def, lo int) int {
	v, ok := l.env[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || (n != 0 && n < lo) {
		l.fail(fmt.Sprintf("%s=%q: want 0 (no limit) or an integer of at least %d", k, v, lo))
		return def
	}
	return n
}

// paths is a ':'-separated list of absolute paths.
func (l *loader) paths(k string) []string {
	var out []string
	for _, p := range strings.Split(l.env[k], ":") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			l.fail(fmt.Sprintf("%s: %q is not an absolute path", k, p))
			continue
		}
		out = append(out, p)
	}
	return out
}

// lenientInt falls back to the default with a warning (pool sizes).
func (l *loader) lenientInt(k string, def int) int {
	v, ok := l.env[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		l.warn(fmt.Sprintf("%s=%q is not a positive integer; using %d", k, v, def))
		return def
	}
	return n
}

func (l *loader) float(k string, def float64) float64 {
	v, ok := l.env[k]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		l.fail(fmt.Sprintf("%s=%q: want a number", k, v))
		return def
	}
	return f
}

// ms parses a timer that must fire: a bad value — not an integer, or
// below 1 ms — keeps the default with a warning, never "fire now"; values
// clamp to 2^31-1 ms.
func (l *loader) ms(k string, def int64) time.Duration {
	return l.timer(k, def, false)
}

// msOff is ms where 0 means off: the limit or period is disabled.
func (l *loader) msOff(k string, def int64) time.Duration {
	return l.timer(k, def, true)
}

func (l *loader) timer(k string, def int64, zeroOff bool) time.Duration {
	v, ok := l.env[k]
	if !ok {
		return time.Duration(def) * time.Millisecond
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		l.warn(fmt.Sprintf("%s=%q is not an integer number of milliseconds; using %d", k, v, def))
		n = def
	case n == 0 && zeroOff:
	case n < 1:
		want := "at least 1"
		if zeroOff {
			want = "0 (off) or at least 1"
		}
		l.warn(fmt.Sprintf("%s=%q: want %s ms; using %d", k, v, want, def))
		n = def
	case n > 1<<31-1:
		l.warn(fmt.Sprintf("%s=%q is above 2147483647 ms; clamped", k, v))
		n = 1<<31 - 1
	}
	return time.Duration(n) * time.Millisecond
}

func (l *loader) boolean(k string, def bool) bool {
	v, ok := l.env[k]
	if !ok {
		return def
	}
	if b, ok := parseBool(v); ok {
		return b
	}
	l.warn(fmt.Sprintf("%s=%q is not a boolean (on/off); using %v", k, v, def))
	return def
}

func parseBool(v string) (value, ok bool) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

func (l *loader) list(k string) []string {
	var out []string
	for _, s := range strings.Split(l.env[k], ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, strings.ToLower(s))
		}
	}
	return out
}

const harnessPrefix = "AGENTA_RUNNER_HARNESS_"

// reserved names share the prefix but are settings, not harnesses.
var reservedHarnessVars = map[string]bool{"AGENTA_RUNNER_HARNESS_DIR": true}

func harnesses(environ []string, l *loader) map[string]Harness {
	out := map[string]Harness{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, harnessPrefix) || reservedHarnessVars[k] {
			continue
		}
		name := strings.ToLower(strings.TrimPrefix(k, harnessPrefix))
		if name == "" || strings.IndexFunc(name, func(r rune) bool { return !(unicode.IsLower(r) || unicode.IsDigit(r) || r == '_') }) >= 0 {
			l.fail(fmt.Sprintf("%s: harness names are letters, digits and underscores", k))
			continue
		}
		argv, err := SplitCommand(v)
		if err != nil || len(argv) == 0 {
			l.fail(fmt.Sprintf("%s=%q: want a command line, e.g. \"/usr/local/bin/my-agent --acp\"", k, v))
			continue
		}
		out[name] = Harness{Name: name, Command: argv}
	}
	return out
}

// SplitCommand splits a command line on spaces, honouring single and
// double quotes and backslash escapes; no other shell syntax.
func SplitCommand(s string) ([]string, error) {
	var (
		out   []string
		cur   strings.Builder
		quote rune
		in    bool
		esc   bool
	)
	for _, r := range s {
		switch {
		case esc:
			cur.WriteRune(r)
			esc = false
		case r == '\\' && quote != '\'':
			esc, in = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case unicode.IsSpace(r):
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 || esc {
		return nil, fmt.Errorf("unterminated quote or escape")
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// Environ is os.Environ, kept here so only this package touches the
// process environment.
func Environ() []string { return os.Environ() }
