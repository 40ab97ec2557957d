package runnertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/wire"
)

// Client calls a runner's HTTP API with its token.
type Client struct {
	Base  string // http://127.0.0.1:<port>
	Token string
	// Log, when set, is the runner's log, added to a failed request's
	// message.
	Log fmt.Stringer
}

// Turn is what one streamed turn returned.
type Turn struct {
	Status int
	Events []wire.Event
	Result wire.Result
	Raw    []byte // the whole response body
}

// Text is the concatenated message deltas of the turn.
func (tr Turn) Text() string {
	var b strings.Builder
	for _, e := range tr.Events {
		if e.Type == "message_delta" {
			b.WriteString(e.Delta)
		}
	}
	return b.String()
}

// Stream sends req to /stream as NDJSON and reads the whole stream, for
// two minutes at most. A non-200 answer is returned with its body in Raw
// and Result.Error.
func (c *Client) Stream(tb testing.TB, req any) Turn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	defer cancel()
	resp := c.Do(tb, ctx, "POST", "/stream", req, "application/x-ndjson")
	defer resp.Body.Close()
	var tr Turn
	tr.Status = resp.StatusCode
	body, err := io.ReadAll(resp.Body)
	tr.Raw = body
	if err != nil {
		tb.Fatalf("read /stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = json.Unmarshal(body, &tr.Result)
		return tr
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	sawResult := false
	for sc.Scan() {
		var rec wire.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatalf("bad NDJSON line %.200q: %v", sc.Bytes(), err)
		}
		switch {
		case rec.Event != nil:
			tr.Events = append(tr.Events, *rec.Event)
		case rec.Result != nil:
			tr.Result, sawResult = *rec.Result, true
		}
	}
	if !sawResult {
		tb.Fatalf("stream ended without a result (%d bytes):\n%.2000s", len(body), body)
	}
	return tr
}

// Call sends a request with a JSON body (nil for none), for two minutes
// at most, and returns the status and body.
func (c *Client) Call(tb testing.TB, method, path string, body any) (int, []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	defer cancel()
	resp := c.Do(tb, ctx, method, path, body, "application/json")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// Do sends Request's request and fails the test if it gets no response.
func (c *Client) Do(tb testing.TB, ctx context.Context, method, path string, body any, accept string) *http.Response {
	tb.Helper()
	resp, err := http.DefaultClient.Do(c.Request(tb, ctx, method, path, body, accept))
	if err != nil {
		log := ""
		if c.Log != nil {
			log = "\nrunner log:\n" + c.Log.String()
		}
		tb.Fatalf("%s %s: %v%s", method, path, err, log)
	}
	return resp
}

// Request is an authenticated request with a body: nil for none, a
// string or []byte as it is, anything else as JSON.
func (c *Client) Request(tb testing.TB, ctx context.Context, method, path string, body any, accept string) *http.Request {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	return req
}
