package workspace

import (
	"encoding/json"
	"strconv"

	"github.com/agentrunner/runner/internal/filetree"
)

// appendManifest appends m as encoding/json would write it, byte for byte
// (FuzzManifestEncoding holds it to that), at a fraction of the cost: a
// manifest of a large tree is written by every checkpoint that changed
// anything.
func appendManifest(b []byte, m Manifest) []byte {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(m.Version), 10)
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, m.Time, 10)
	b = append(b, `,"entries":`...)
	if m.Entries == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i, e := range m.Entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEntry(b, e)
	}
	return append(b, "]}"...)
}

func appendEntry(b []byte, e filetree.Entry) []byte {
	b = append(b, `{"p":`...)
	b = appendString(b, e.Path)
	b = append(b, `,"k":`...)
	b = appendString(b, e.Kind)
	b = append(b, `,"m":`...)
	b = strconv.AppendUint(b, uint64(e.Mode), 10)
	if e.Size != 0 {
		b = append(b, `,"s":`...)
		b = strconv.AppendInt(b, e.Size, 10)
	}
	if e.MTime != 0 {
		b = append(b, `,"t":`...)
		b = strconv.AppendInt(b, e.MTime, 10)
	}
	if e.Hash != "" {
		b = append(b, `,"h":`...)
		b = appendString(b, e.Hash)
	}
	if e.Target != "" {
		b = append(b, `,"l":`...)
		b = appendString(b, e.Target)
	}
	return append(b, '}')
}

// appendString quotes s; what encoding/json would escape (quotes,
// backslashes, control characters, <, >, &, anything not ASCII) is left
// to it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
