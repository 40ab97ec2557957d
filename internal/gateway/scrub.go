package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// scrubber replaces every form a key takes in a response (as sent,
// URL-encoded, JSON-escaped) with its placeholder, so an upstream that
// echoes a credential hands the sandbox the placeholder it already has.
type scrubber struct {
	from, to [][]byte
	longest  int
	repl     *strings.Replacer
}

func newScrubber(secrets []*secret) *scrubber {
	type pair struct{ from, to string }
	var pairs []pair
	for _, s := range secrets {
		j, _ := json.Marshal(s.key)
		jsonForm := string(j[1 : len(j)-1])
		for _, f := range []string{s.key, url.QueryEscape(s.key), url.PathEscape(s.key), jsonForm, strings.ReplaceAll(jsonForm, "/", `\/`)} {
			if !slices.ContainsFunc(pairs, func(p pair) bool { return p.from == f }) {
				pairs = append(pairs, pair{f, s.placeholder})
			}
		}
	}
	// Longest first: where one form starts another, the whole is replaced.
	slices.SortStableFunc(pairs, func(a, b pair) int { return len(b.from) - len(a.from) })
	sc := &scrubber{}
	var old []string
	for _, p := range pairs {
		sc.from = append(sc.from, []byte(p.from))
		sc.to = append(sc.to, []byte(p.to))
		sc.longest = max(sc.longest, len(p.from))
		old = append(old, p.from, p.to)
	}
	sc.repl = strings.NewReplacer(old...)
	return sc
}

func (sc *scrubber) string(v string) string { return sc.repl.Replace(v) }

func (sc *scrubber) header(h http.Header) {
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = sc.repl.Replace(v)
		}
	}
}

// scrub appends src to dst with every form replaced, except a tail that
// may begin a form (unless final): that tail is returned, to be scrubbed
// with what follows it.
func (sc *scrubber) scrub(dst, src []byte, final bool) ([]byte, []byte) {
	for {
		i, j := sc.next(src)
		if i < 0 {
			break
		}
		dst = append(append(dst, src[:i]...), sc.to[j]...)
		src = src[i+len(sc.from[j]):]
	}
	keep := 0
	if !final {
		keep = sc.partial(src)
	}
	return append(dst, src[:len(src)-keep]...), src[len(src)-keep:]
}

// next is where the earliest form in b starts and which (the longest of
// those starting there), or -1.
func (sc *scrubber) next(b []byte) (int, int) {
	at, which := -1, -1
	for j, f := range sc.from {
		if i := bytes.Index(b, f); i >= 0 && (at < 0 || i < at) {
			at, which = i, j
		}
	}
	return at, which
}

// partial is the length of b's longest suffix that is a proper prefix of
// a form. A stream of text rarely ends in one (an SSE event ends in a
// newline), so holding it back does not delay streaming.
func (sc *scrubber) partial(b []byte) int {
	for n := min(len(b), sc.longest-1); n > 0; n-- {
		suffix := b[len(b)-n:]
		for _, f := range sc.from {
			if len(f) > n && bytes.HasPrefix(f, suffix) {
				return n
			}
		}
	}
	return 0
}

// scrubBody is a response body with its keys scrubbed as it streams: it
// holds back at most a key's length, never the whole body.
type scrubBody struct {
	sc    *scrubber
	resp  *http.Response
	r     io.ReadCloser
	chunk []byte
	in    []byte // read, not yet scrubbed: a tail that may begin a key
	out   []byte // scrubbed, not yet returned
	off   int
	err   error
}

func (sc *scrubber) body(resp *http.Response) *scrubBody {
	return &scrubBody{sc: sc, resp: resp, r: resp.Body, chunk: make([]byte, 32<<10)}
}

func (b *scrubBody) Read(p []byte) (int, error) {
	for b.off == len(b.out) {
		if b.err != nil {
			return 0, b.err
		}
		n, err := b.r.Read(b.chunk)
		b.in = append(b.in, b.chunk[:n]...)
		b.err = err
		var rest []byte
		b.out, rest = b.sc.scrub(b.out[:0], b.in, err != nil)
		b.in = b.in[:copy(b.in, rest)]
		b.off = 0
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	return n, nil
}

// Close closes the upstream body, which fills the response's trailers,
// and scrubs them before the proxy copies them.
func (b *scrubBody) Close() error {
	err := b.r.Close()
	if b.resp != nil {
		b.sc.header(b.resp.Trailer)
	}
	return err
}

// reader is r with every form replaced as it streams (a request body).
func (sc *scrubber) reader(r io.ReadCloser) *scrubBody {
	return &scrubBody{sc: sc, r: r, chunk: make([]byte, 32<<10)}
}

// modelRenamer replaces each placeholder model, as a whole JSON string,
// in a request body, and as a path segment (before a ':' or the end) in
// its path.
func modelRenamer(models map[string]string) (*scrubber, *strings.Replacer) {
	sc := &scrubber{}
	var body, paths []string
	for from, to := range models {
		f, _ := json.Marshal(from)
		t, _ := json.Marshal(to)
		sc.from = append(sc.from, f)
		sc.to = append(sc.to, t)
		sc.longest = max(sc.longest, len(f))
		body = append(body, string(f), string(t))
		paths = append(paths, "/models/"+from+":", "/models/"+url.PathEscape(to)+":")
	}
	sc.repl = strings.NewReplacer(body...)
	return sc, strings.NewReplacer(paths...)
}
