package gateway

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// chunks yields b in reads of the given sizes, cycling.
type chunks struct {
	b     []byte
	sizes []int
	i     int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(c.sizes[c.i%len(c.sizes)], len(c.b), len(p))
	c.i++
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func (c *chunks) Close() error { return nil }

// TestScrubberAcrossEveryChunkBoundary: a key split at any byte between
// two upstream reads, or read a byte at a time, still leaves as its
// placeholder, in every form it is echoed in.
func TestScrubberAcrossEveryChunkBoundary(t *testing.T) {
	key := "sk-a/b+c\"d-0123456789"
	sc := newScrubber([]*secret{{key: key, placeholder: "runner-key-ph"}})
	body := "a " + key + " q=sk-a%2Fb%2Bc%22d-0123456789 j=" + `sk-a\/b+c\"d-0123456789` + " sk-a/b+ " + key + key + " end sk-a"
	want := "a runner-key-ph q=runner-key-ph j=runner-key-ph sk-a/b+ runner-key-phrunner-key-ph end sk-a"
	for split := 1; split <= len(body); split++ {
		for _, sizes := range [][]int{{split, len(body)}, {1}, {split, 1, 3}} {
			resp := &http.Response{Body: &chunks{b: []byte(body), sizes: sizes}}
			got, err := io.ReadAll(sc.body(resp))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Fatalf("reads of %v: got\n%s\nwant\n%s", sizes, got, want)
			}
		}
	}
}

// TestScrubberHoldsBackOnlyAKeyPrefix: a read that does not end in the
// start of a key is passed on whole at once, so a stream is not delayed.
func TestScrubberHoldsBackOnlyAKeyPrefix(t *testing.T) {
	sc := newScrubber([]*secret{{key: "sk-secret", placeholder: "runner-key-ph"}})
	for _, c := range []struct{ in, out, rest string }{
		{"data: {}\n\n", "data: {}\n\n", ""},
		{"data: sk-", "data: ", "sk-"},
		{"data: sk-secret", "data: runner-key-ph", ""},
		{"ends in s", "ends in ", "s"},
	} {
		out, rest := sc.scrub(nil, []byte(c.in), false)
		if string(out) != c.out || !bytes.Equal(rest, []byte(c.rest)) {
			t.Errorf("%q: out %q rest %q, want %q %q", c.in, out, rest, c.out, c.rest)
		}
	}
	if s := sc.string("x sk-secret y"); strings.Contains(s, "sk-secret") {
		t.Errorf("string: %q", s)
	}
}

// BenchmarkScrubBody streams an SSE-like body through the scrubber in
// 4 KiB reads, as a model's answer arrives.
func BenchmarkScrubBody(b *testing.B) {
	sc := newScrubber([]*secret{{key: "sk-proj-0123456789abcdefghijklmnopqrstuvwxyz", placeholder: "runner-key-ph"}})
	body := bytes.Repeat([]byte("data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"some streamed words\"}}\n\n"), 1<<14)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, sc.body(&http.Response{Body: &chunks{b: body, sizes: []int{4 << 10}}})); err != nil {
			b.Fatal(err)
		}
	}
}
