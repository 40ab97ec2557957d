package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var seeds = []string{
	`{"harness":"claude","messages":[{"role":"user","content":"hi"}]}`,
	`{"harness":"pi_core","sandbox":"local","sessionId":"s","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","data":"aGk=","mimeType":"image/png"}]}],"modelConnection":{"provider":"openai","deployment":"direct","credentials":[{"binding":{"kind":"environment","name":"K"},"value":"v","usage":"opaque_http"}]}}`,
	`{"messages":[{"role":"user","content":"x"}],"permissions":{"default":"ask","rules":[{"pattern":"Bash(rm:*)","permission":"deny"}]},"sandboxPermission":{"network":{"mode":"allowlist","allowlist":["example.com"]}}}`,
	`{"customTools":[{"name":"t","inputSchema":{"type":"object"}}],"toolCallback":{"endpoint":"https://x/tools/call"},"mcpServers":[{"name":"m","connection":{"type":"http","url":"https://m"}}]}`,
	`{"secrets":{}}`, `[]`, `null`, `{"messages":5}`, `{"messages":[{"role":"user","content":null}]}`,
	`{"harness":5,"endpoint":null}`, `{"messages":[{"role":"user","content":"a\u00e9\"b"}]} x`, `{"messages":[{"role":"bot"}],"secrets":1}`,
	// The history fast path's edges: escapes, non-ASCII and invalid UTF-8,
	// repeated and case-folded keys, null, blocks beside strings.
	`{"messages":[{"content":"l1\nl2 \ud83d\ude00","role":"assistant"},{"role":"user","content":"cafÃ© ÿ"}]}`,
	`{"messages":[{"role":"user","content":"a"}],"Messages":null}`, `{"MESSAGES":[],"messages":[{"role":"user"}]}`,
	`{"messages":[{"role":"user","role":"tool","content":"x"}],"messages":[]}`, `{"messages":null,"harness":"pi_core"}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"t"}]},{"role":"assistant","content":"ok","extra":1}]}`,
	`{"messages":[{"role":"user","content":"x"},]}`, `{"messages":[{"role":"user","content":"x"}]}`, `{"me\u0073sages":[]}`,
	` { "messages" : [ { "role" : "user" , "content" : "spaced" } ] , "sessionId" : "s" } `, `{"messages":[null,{"role":"user"}]}`,
	`{"harness":"x","messages":[{"role":"user","content":"a"}],"modelConnection":{"provider":"p","deployment":"d"},"meſſages":[]}`,
}

func FuzzDecode(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	// Conversations long enough for the history cache, one the other's
	// continuation.
	f.Add(conversation(3))
	f.Add(conversation(3, `{"role":"user","content":"more"}`))
	cache := wire.NewHistoryCache(1 << 20) // shared by the inputs this process runs
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := wire.Decode(body)
		// With the history of earlier inputs at hand, the same.
		cached, cerr := cache.Decode(body)
		if (err == nil) != (cerr == nil) || (err != nil && err.Error() != cerr.Error()) {
			t.Fatalf("Decode error %v, with the cache %v", err, cerr)
		}
		if diff := cmp.Diff(req, cached); err == nil && diff != "" {
			t.Fatalf("Decode differs with the cache (-plain +cached):\n%s", diff)
		}
		// Decode is held to the two-pass reference: same verdict, same
		// request, same message.
		ref, rerr := wire.ReferenceDecode(body)
		if (err == nil) != (rerr == nil) || (err != nil && err.Error() != rerr.Error()) {
			t.Fatalf("Decode error %v, reference %v", err, rerr)
		}
		if diff := cmp.Diff(ref, req); err == nil && diff != "" {
			t.Fatalf("Decode differs from the reference (-reference +Decode):\n%s", diff)
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error not classed invalid: %v", err)
			}
			return
		}
		// Anything accepted survives encode → decode unchanged (without
		// HTML escaping, which would rewrite raw JSON fields' bytes).
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(req); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b := buf.Bytes()
		again, err := wire.Decode(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if diff := cmp.Diff(req, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip changed the request (-first +second):\n%s", diff)
		}
	})
}

func TestDecodeNamesTheField(t *testing.T) {
	cases := map[string]string{
		`{"harness":5}`: "harness",
		`{"messages":[{"role":"user","content":true}]}`:                              "content",
		`{"sandboxPermission":{"network":{"mode":1}}}`:                               "sandboxPermission.network.mode",
		`{"harnessFiles":[{"path":1}]}`:                                              "harnessFiles.path",
		`{"provider":"openai"}`:                                                      "Legacy top-level",
		`{"messages":[{"role":"user","content":"a"}]} {}`:                            "after top-level value",
		`{"mcpServers":[{"name":"a","connection":{"type":"http","url":"ftp://x"}}]}`: "mcpServers[0].connection.url",
	}
	for body, want := range cases {
		_, err := wire.Decode([]byte(body))
		if err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s) = %v, want an invalid error naming %q", body, err, want)
		}
	}
}

// TestHistoryFastPath: the shapes platforms send are read by the fast
// path (the fuzz target proves it agrees with the reference; this proves
// it is taken), and the shapes it must leave alone are left.
func TestHistoryFastPath(t *testing.T) {
	for body, fast := range map[string]bool{
		`{"harness":"claude","sessionId":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"line\nwith \"escapes\" and é"}]}`: true,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"blocks"}]}],"modelConnection":{"provider":"openai","deployment":"direct"}}`:       true,
		`{"messages":null}`:                   true,
		`{"messages":[],"Messages":[]}`:       false,
		`{"messages":[],"messages":[]}`:       false,
		`{"messages":[{"role":"user"}]} {}`:   false,
		`{"me\u0073sages":[{"role":"u"}]}`:    false,
		`{"messages":[{"role":"user",}]}`:     false,
		`[{"messages":[]}]`:                   false,
		`{"messages":[{"role":"user"}],"x":}`: false,
	} {
		if got := wire.TakesFastPath([]byte(body)); got != fast {
			t.Errorf("fast path for %s: %v, want %v", body, got, fast)
		}
	}
}
