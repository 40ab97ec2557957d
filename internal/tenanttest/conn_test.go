package tenanttest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// rawConn is one client connection the test holds open itself.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, r *runner) *rawConn {
	t.Helper()
	u, err := url.Parse(r.Base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// get sends GET path on the connection (kept alive) and reads the answer.
func (c *rawConn) get(t *testing.T, path string) (*http.Response, []byte) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: runner\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return c.read(t)
}

func (c *rawConn) read(t *testing.T) (*http.Response, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a bound on a hang, not a timing
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the answer's body: %v", err)
	}
	return resp, body
}

// closedByServer reports whether the runner closes c: the read ends with
// EOF (or a reset), not with the test's own bound on a hang.
func (c *rawConn) closedByServer(t *testing.T) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := c.br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

// oneShot is a client whose every request has a connection of its own.
var oneShot = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func openConnections(t *testing.T, body []byte) int {
	t.Helper()
	var h struct {
		Connections *int `json:"connections"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Connections == nil {
		t.Fatalf("/health has no connections count: %s", body)
	}
	return *h.Connections
}

// TestFaultIdleConnections: 20,000 idle keep-alive connections took every
// descriptor of the runner, and /health stopped answering. What must
// hold: past AGENTA_RUNNER_MAX_CONNECTIONS a turn is refused with 503
// naming the setting while /health still answers 200, a freed place is
// served again, and an idle keep-alive connection is closed after
// AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS.
func TestFaultIdleConnections(t *testing.T) {
	needBwrap(t)
	t.Run("cap", func(t *testing.T) {
		const max = 6
		r := start(t, fmt.Sprintf("AGENTA_RUNNER_MAX_CONNECTIONS=%d", max), "AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS=600000")
		http.DefaultClient.CloseIdleConnections() // start's own, so that every place is the test's
		// Hold connections until the runner counts only ours and answers
		// from its reserve (Connection: close): the cap is reached.
		var held []*rawConn
		deadline := time.Now().Add(time.Minute)
		for {
			c := dial(t, r)
			resp, body := c.get(t, "/health")
			if resp.StatusCode != 200 {
				t.Fatalf("/health: %d %s", resp.StatusCode, body)
			}
			if !resp.Close {
				held = append(held, c)
			} else if n := openConnections(t, body); n == max && len(held) == max {
				break // the runner is full, of our connections only
			}
			if len(held) > max {
				t.Fatalf("the runner kept %d connections open, over AGENTA_RUNNER_MAX_CONNECTIONS=%d", len(held), max)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the runner never reached its cap of %d (%d held)", max, len(held))
			}
		}
		req, err := http.NewRequest("POST", r.Base+"/stream", strings.NewReader(`{"harness":"fake","messages":[{"role":"user","content":"say over the cap"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := oneShot.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "AGENTA_RUNNER_MAX_CONNECTIONS") {
			t.Fatalf("a turn over the cap: %d %s; want 503 naming AGENTA_RUNNER_MAX_CONNECTIONS", resp.StatusCode, body)
		}
		for _, path := range []string{"/health", "/ready"} {
			resp, err := oneShot.Get(r.Base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s at the cap: %d, want 200", path, resp.StatusCode)
			}
		}
		// A place given back is served again (once the runner saw it go).
		held[0].Close()
		for {
			tr := r.stream(t, fake("say room again", nil))
			if tr.Status == 200 && tr.Result.OK {
				break
			}
			if tr.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("a turn after a place was freed: %d %+v", tr.Status, tr.Result)
			}
		}
	})
	t.Run("idle", func(t *testing.T) {
		r := start(t, "AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS=200")
		c := dial(t, r)
		if resp, body := c.get(t, "/health"); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("/health: %d close=%v %s", resp.StatusCode, resp.Close, body)
		}
		if !c.closedByServer(t) {
			t.Fatal("an idle keep-alive connection stayed open past AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS=200")
		}
	})
}

// TestFaultLyingContentLength: an authenticated client announces a 1 MB
// body, sends 10 bytes and stalls, holding its connection (and its turn
// slot) forever. What must hold: after AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS
// of silence the request is refused naming the setting and the
// connection closed; and the body deadline is gone once the body is
// read, so a stream that outlasts it is not cut.
func TestFaultLyingContentLength(t *testing.T) {
	needBwrap(t)
	r := start(t, "AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS=300")
	c := dial(t, r)
	fmt.Fprintf(c, "POST /run HTTP/1.1\r\nHost: runner\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"harness\"", token)
	resp, body := c.read(t)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS") {
		t.Fatalf("a stalled body: %d %s; want 400 naming AGENTA_RUNNER_HTTP_READ_TIMEOUT_MS", resp.StatusCode, body)
	}
	if !c.closedByServer(t) {
		t.Fatal("the connection of a stalled body stayed open")
	}
	// The fake harness's sleep outlasts the body deadline; the stream goes on.
	tr := r.stream(t, fake("sleep 1s\nsay still here", map[string]any{"sessionId": "slow"}))
	if !tr.Result.OK || !strings.Contains(tr.Text(), "still here") {
		t.Fatalf("a stream longer than the body deadline: %d %+v", tr.Status, tr.Result)
	}
}
