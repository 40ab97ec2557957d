package render

import (
	"strings"
	"unicode/utf8"
)

// Clean returns s safe to write to a terminal: escape sequences (CSI, OSC,
// DCS and the rest) are dropped whole, as are C0 controls other than
// newline and tab, DEL, C1 controls, bidirectional overrides and invalid
// UTF-8. Everything a harness or a model produced goes through it, so no
// output can move the cursor, retitle the window, set the clipboard or
// hide text from the person reading it.
func Clean(s string) string {
	if plain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0x1b:
			i = skipEscape(s, i+1)
			continue
		case c == '\n' || c == '\t':
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
		case c < utf8.RuneSelf:
			b.WriteByte(c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError && !hiddenRune(r) {
				b.WriteString(s[i : i+n])
			}
			i += n
			continue
		}
		i++
	}
	return b.String()
}

// plain reports whether s is printable ASCII, newlines and tabs: the
// common case, returned as is.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\n' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// hiddenRune is a rune a terminal acts on or that reorders what is shown:
// C1 controls (U+009B is a CSI to some terminals) and bidi controls.
func hiddenRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// skipEscape returns the index after the escape sequence whose ESC was at
// i-1. An unterminated sequence runs to the end of s.
func skipEscape(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '[': // CSI: parameters, intermediates, one final byte
		i++
		for i < len(s) && s[i] >= 0x20 && s[i] <= 0x3f {
			i++
		}
		if i < len(s) && s[i] >= 0x40 && s[i] <= 0x7e {
			i++
		}
		return i
	case ']', 'P', 'X', '^', '_': // OSC, DCS, SOS, PM, APC: up to BEL or ST
		for i++; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b {
				if i+1 < len(s) && s[i+1] == '\\' {
					return i + 2
				}
				return i // a new sequence starts; the outer loop skips it
			}
		}
		return i
	}
	// Other escapes: intermediates then one final byte (ESC c, ESC ( B, ...).
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
		i++
	}
	if i < len(s) && s[i] >= 0x30 && s[i] <= 0x7e {
		i++
	}
	return i
}
