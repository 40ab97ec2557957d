package wire

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// The history fast path. A platform sends the whole conversation every
// turn, so the messages array is nearly all of a late request's bytes,
// and encoding/json reads it at ~30 MB/s (it scans each value twice and
// decodes through reflection). decodeFast parses the top-level object
// and the messages array by hand, hands every other field to
// encoding/json as a small object of its own, and gives up (ok false) on
// anything it is not sure to read exactly as encoding/json would: the
// caller then decodes the whole body the slow way, which also words
// every error. FuzzDecode holds the result to the reference decoder.

// decodeFast returns the decoded request, or ok false to say "decode it
// the slow way" (the body may still be valid). With a cache, a history
// it has seen is not decoded again.
func decodeFast(body []byte, cache *HistoryCache) (req *Request, ok bool) {
	// One copy of the body as a string: the messages' texts are slices
	// of it, not an allocation each.
	p := scan{b: body, s: string(body), cache: cache}
	p.ws()
	if !p.eat('{') {
		return nil, false
	}
	var (
		rest     = make([]byte, 0, 256)
		msgs     []Message
		haveMsgs bool
	)
	rest = append(rest, '{')
	p.ws()
	if !p.eat('}') {
		for {
			p.ws()
			start := p.i
			key, ok := p.member()
			if !ok {
				return nil, false
			}
			if string(key) == "messages" {
				if haveMsgs {
					return nil, false // a repeated key: the last wins, leave it to encoding/json
				}
				haveMsgs = true
				if msgs, ok = p.messages(); !ok {
					return nil, false
				}
			} else {
				if foldsToMessages(key) {
					return nil, false
				}
				if !p.skip() {
					return nil, false
				}
				if len(rest) > 1 {
					rest = append(rest, ',')
				}
				rest = append(rest, body[start:p.i]...)
			}
			p.ws()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return nil, false
			}
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, false
	}
	rest = append(rest, '}')
	r, err := parse(rest)
	if err != nil {
		return nil, false // the slow path on the whole body words it
	}
	r.Messages = msgs
	return r, true
}

// foldsToMessages reports a key encoding/json could match to the
// messages field besides the exact name (it folds case, and matches K
// to the Kelvin sign and s to the long s): leave such bodies to it.
func foldsToMessages(key []byte) bool {
	if len(key) != len("messages") {
		return !isASCII(key) && len(key) <= 3*len("messages")
	}
	return bytes.EqualFold(key, []byte("messages"))
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// scan is a cursor over a JSON text, b, which s holds as a string.
type scan struct {
	b     []byte
	s     string
	i     int
	cache *HistoryCache // nil: none
}

func (p *scan) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *scan) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *scan) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// member reads an object member's key and its colon, up to its value.
func (p *scan) member() ([]byte, bool) {
	key, ok := p.key()
	if !ok {
		return nil, false
	}
	p.ws()
	if !p.eat(':') {
		return nil, false
	}
	p.ws()
	return key, true
}

// key reads an object key that needs no decoding (no escapes).
func (p *scan) key() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	ascii := true
	for j, c := range p.b[p.i:] {
		switch {
		case c == '"':
			k := p.b[p.i : p.i+j]
			if !ascii && !utf8.Valid(k) {
				return nil, false
			}
			p.i += j + 1
			return k, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// str reads a string value exactly as encoding/json decodes it.
func (p *scan) str() (string, bool) {
	start := p.i
	if !p.eat('"') {
		return "", false
	}
	// Most strings have no escape: find the closing quote at memchr speed
	// and check the bytes before it in one tight pass.
	if j := bytes.IndexByte(p.b[p.i:], '"'); j >= 0 {
		inner := p.b[p.i : p.i+j]
		if bytes.IndexByte(inner, '\\') < 0 {
			ascii := true
			for _, c := range inner {
				if c < 0x20 {
					return "", false
				}
				if c >= utf8.RuneSelf {
					ascii = false
				}
			}
			if ascii || utf8.Valid(inner) {
				p.i += j + 1
				return p.s[start+1 : p.i-1], true
			}
		}
	}
	plain := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			inner := p.b[start+1 : p.i-1]
			if plain || (bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner)) {
				return p.s[start+1 : p.i-1], true
			}
			// Escapes, or bytes encoding/json replaces: let it decode this one string.
			var s string
			if json.Unmarshal(p.b[start:p.i], &s) != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			plain = false
			p.i += 2
			continue
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			plain = false
		}
		p.i++
	}
	return "", false
}

// skip moves past one value without decoding it; encoding/json checks
// what it covered when it decodes the rest of the request.
func (p *scan) skip() bool {
	switch c := p.peek(); c {
	case '"':
		p.i++
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				p.i++
				return true
			case '\\':
				p.i++
			}
			p.i++
		}
		return false
	case '{', '[':
		depth := 0
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				if !p.skip() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					p.i++
					return true
				}
			}
			p.i++
		}
		return false
	case 0:
		return false
	default:
		start := p.i
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return p.i > start
			}
			p.i++
		}
		return p.i > start
	}
}

// literal moves past the exact bytes lit.
func (p *scan) literal(lit string) bool {
	if len(p.b)-p.i < len(lit) || string(p.b[p.i:p.i+len(lit)]) != lit {
		return false
	}
	p.i += len(lit)
	return true
}

// messages reads the messages array (or null).
func (p *scan) messages() ([]Message, bool) {
	if p.literal("null") {
		return nil, true
	}
	start := p.i
	if !p.eat('[') {
		return nil, false
	}
	// The history a request repeats: the messages of an earlier request
	// whose array these bytes begin with, decoded then (the bytes are the
	// same, so are the messages, and they were checked then).
	seen, n := p.cache.lookup(p.b[start:])
	if n > 0 {
		p.i = start + n
	}
	// One allocation instead of a doubling copy of the history: a message
	// is an object, so there are at most as many as there are braces (an
	// overestimate when blocks or texts hold some), and no more than
	// there is room for in the body (the shortest, {"role":""}, is 11
	// bytes).
	rest := p.b[p.i:]
	msgs := make([]Message, len(seen), len(seen)+min(bytes.Count(rest, []byte{'{'}), len(rest)/11+1))
	copy(msgs, seen)
	p.ws()
	if p.eat(']') {
		if len(seen) == 0 {
			return msgs, true
		}
		return p.remember(start, start+n, msgs)
	}
	if len(seen) > 0 && !p.eat(',') {
		return nil, false
	}
	for {
		p.ws()
		m, ok := p.message()
		if !ok {
			return nil, false
		}
		msgs = append(msgs, m)
		end := p.i
		p.ws()
		if p.eat(']') {
			return p.remember(start, end, msgs)
		}
		if !p.eat(',') {
			return nil, false
		}
	}
}

// remember offers the array's bytes from start to the end of its last
// message, and its messages, to the cache.
func (p *scan) remember(start, end int, msgs []Message) ([]Message, bool) {
	p.cache.add(p.s[start:end], msgs)
	return msgs, true
}

// message reads one message: by hand when it is {"role": string,
// "content": string or null} in any order, else through encoding/json.
func (p *scan) message() (Message, bool) {
	start := p.i
	if m, ok := p.simpleMessage(); ok {
		return m, true
	}
	p.i = start
	if !p.skip() {
		return Message{}, false
	}
	var m Message
	if json.Unmarshal(p.b[start:p.i], &m) != nil {
		return Message{}, false
	}
	if m.Content.Blocks == nil {
		m.Content.IsText = true // absent content is empty text, as validate has it
	}
	return m, true
}

func (p *scan) simpleMessage() (Message, bool) {
	var m Message
	if !p.eat('{') {
		return m, false
	}
	var haveRole, haveContent bool
	m.Content.IsText = true // absent content is empty text, as validate has it
	p.ws()
	if p.eat('}') {
		return m, true
	}
	for {
		p.ws()
		key, ok := p.member()
		if !ok {
			return m, false
		}
		switch {
		case string(key) == "role" && !haveRole:
			haveRole = true
			if m.Role, ok = p.str(); !ok {
				return m, false
			}
		case string(key) == "content" && !haveContent:
			haveContent = true
			if p.literal("null") {
				m.Content = MessageContent{IsText: true}
				break
			}
			text, ok := p.str()
			if !ok {
				return m, false
			}
			m.Content = MessageContent{Text: text, IsText: true}
		default:
			return m, false // other or repeated keys: encoding/json decides
		}
		p.ws()
		if p.eat('}') {
			return m, true
		}
		if !p.eat(',') {
			return m, false
		}
	}
}
