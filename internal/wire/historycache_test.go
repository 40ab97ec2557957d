package wire_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
)

// conversation is a request body with n turns of history: text with
// escapes and non-ASCII, blocks, a tool call and its result, as
// platforms send them.
func conversation(n int, extra ...string) []byte {
	var msgs []string
	for i := range n {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"user","content":"question %d: \"why\"\nsecond line, café"}`, i),
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"answer %d"},{"type":"tool_call","toolCallId":"c%d","toolName":"read","input":{"path":"/a"}}]}`, i, i),
			fmt.Sprintf(`{"role":"tool","content":[{"type":"tool_result","toolCallId":"c%d","output":"ok"}]}`, i))
	}
	msgs = append(msgs, extra...)
	return []byte(`{"harness":"claude","sessionId":"s","messages":[` + strings.Join(msgs, ",") + `],"model":"m"}`)
}

func mustDecode(t *testing.T, c *wire.HistoryCache, body []byte) *wire.Request {
	t.Helper()
	got, err := c.Decode(body)
	want, werr := wire.Decode(body)
	if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
		t.Fatalf("cached decode error %v, plain %v", err, werr)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("cached decode differs from plain (-plain +cached):\n%s", diff)
	}
	return got
}

// TestHistoryCache: a request that repeats an earlier one's history and
// adds to it is decoded from the cache for what it repeats, and decodes
// exactly as without the cache, also when the history changed, was cut,
// or what follows it is broken.
func TestHistoryCache(t *testing.T) {
	c := wire.NewHistoryCache(1 << 20)
	first := conversation(10)
	mustDecode(t, c, first)
	hits := func(want int64) {
		t.Helper()
		if _, h := c.Stats(); h != want {
			t.Fatalf("cache hits %d, want %d", h, want)
		}
	}
	hits(0)
	next := conversation(10, `{"role":"assistant","content":"done"}`, `{"role":"user","content":"and now?"}`)
	if r := mustDecode(t, c, next); len(r.Messages) != 32 {
		t.Fatalf("%d messages", len(r.Messages))
	}
	hits(1)
	mustDecode(t, c, next) // a retry: the very same history
	hits(2)
	// The same start, changed in the middle: no history of the cache
	// fits, and nothing of it leaks in.
	changed := []byte(strings.Replace(string(next), "answer 5", "answer five", 1))
	mustDecode(t, c, changed)
	hits(2)
	// Cut short, and broken right after the repeated part.
	mustDecode(t, c, conversation(9))
	mustDecode(t, c, append(next[:len(next)-len(`],"model":"m"}`)], []byte(`,}`)...))
	mustDecode(t, c, []byte(strings.TrimSuffix(string(next), `,"model":"m"}`)+`]`))
	// Entries past the cache's size are dropped, oldest first.
	small := wire.NewHistoryCache(len(first) + 100)
	mustDecode(t, small, first)
	mustDecode(t, small, conversation(10, `{"role":"user","content":"x"}`))
	if _, h := small.Stats(); h != 1 {
		t.Fatalf("small cache hits %d", h)
	}
}

// TestHistoryCacheConcurrent: conversations decoded side by side share
// the cache without a race, and each decodes as it would alone.
func TestHistoryCacheConcurrent(t *testing.T) {
	c := wire.NewHistoryCache(1 << 20)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var said []string // this goroutine's conversation grows
			for i := range 20 {
				said = append(said, fmt.Sprintf(`{"role":"user","content":"g%d turn %d"}`, g, i))
				body := conversation(5, said...)
				got, err := c.Decode(body)
				if err != nil {
					t.Error(err)
					return
				}
				want, _ := wire.Decode(body)
				if !cmp.Equal(want, got) {
					t.Errorf("goroutine %d turn %d: cached decode differs", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, h := c.Stats(); h == 0 {
		t.Fatal("no hits")
	}
}

func BenchmarkDecodeHistoryCached(b *testing.B) {
	var msgs []map[string]any
	for i := range 300 {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("hello %d", i)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("echo: hello %d.", i)})
	}
	prev, _ := json.Marshal(map[string]any{"harness": "claude", "sessionId": "s", "projectId": "p", "messages": msgs[:598]})
	body, _ := json.Marshal(map[string]any{"harness": "claude", "sessionId": "s", "projectId": "p", "messages": msgs})
	c := wire.NewHistoryCache(64 << 20)
	if _, err := c.Decode(prev); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}
